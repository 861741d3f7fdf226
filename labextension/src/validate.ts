/**
 * Runtime checks of kernel messages against the schema generated from
 * `torchdevice_magic/protocol.py` (SCHEMA in protocol.ts): the sidebar draws
 * nothing it has not checked, and the rules are written once, in Python.
 */

import { FromKernel, PROTOCOL_VERSION, SCHEMA } from './protocol';

type Spec = string;

const STRUCTS = SCHEMA.structs as unknown as Record<string, Record<string, Spec>>;
const MESSAGES = SCHEMA.messages as unknown as Record<
  string,
  { from: string; fields: Record<string, Spec> }
>;

/** Why `value` does not match `spec`, or null when it does. */
export function problem(value: unknown, spec: Spec, where = 'message'): string | null {
  if (spec.endsWith('?')) {
    if (value === null || value === undefined) {
      return null;
    }
    spec = spec.slice(0, -1);
  }
  switch (spec) {
    case 'any':
      return null;
    case 'str':
      return typeof value === 'string' ? null : `${where} must be a string`;
    case 'bool':
      return typeof value === 'boolean' ? null : `${where} must be true or false`;
    case 'int':
      return Number.isInteger(value) ? null : `${where} must be an integer`;
    case 'float':
      return typeof value === 'number' && Number.isFinite(value)
        ? null
        : `${where} must be a number`;
  }
  if (spec.startsWith('enum[')) {
    const options = spec.slice(5, -1).split('|');
    return options.includes(value as string)
      ? null
      : `${where} must be one of ${options.join(', ')}`;
  }
  if (spec.startsWith('list[')) {
    if (!Array.isArray(value)) {
      return `${where} must be a list`;
    }
    const inner = spec.slice(5, -1);
    for (let i = 0; i < value.length; i++) {
      const found = problem(value[i], inner, `${where}[${i}]`);
      if (found) {
        return found;
      }
    }
    return null;
  }
  const fields = STRUCTS[spec];
  if (!fields) {
    return `unknown type ${spec}`;
  }
  return fieldsProblem(value, fields, where);
}

function fieldsProblem(value: unknown, fields: Record<string, Spec>, where: string): string | null {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return `${where} must be an object`;
  }
  const record = value as Record<string, unknown>;
  for (const [name, spec] of Object.entries(fields)) {
    if (!(name in record) && !spec.endsWith('?')) {
      return `${where} lacks ${name}`;
    }
    const found = problem(record[name], spec, `${where}.${name}`);
    if (found) {
      return found;
    }
  }
  return null;
}

/** Why a message from the kernel cannot be used, or null. */
export function messageProblem(message: unknown): string | null {
  if (typeof message !== 'object' || message === null) {
    return 'not an object';
  }
  const record = message as Record<string, unknown>;
  const entry = typeof record.type === 'string' ? MESSAGES[record.type] : undefined;
  if (!entry || entry.from !== 'kernel') {
    return `unknown message type ${String(record.type)}`;
  }
  if (record.version !== PROTOCOL_VERSION) {
    return `protocol version ${String(record.version)} (this sidebar speaks ${PROTOCOL_VERSION})`;
  }
  if (!Number.isInteger(record.seq)) {
    return 'message.seq must be an integer';
  }
  return fieldsProblem(record, entry.fields, 'message');
}

export function isKernelMessage(message: unknown): message is FromKernel {
  return messageProblem(message) === null;
}
