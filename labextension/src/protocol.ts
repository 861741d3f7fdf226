/**
 * The comm protocol spoken with the kernel, mirrored field by field from
 * `torchdevice_magic/protocol.py` (version 1). Keep the two in step: the
 * kernel validates every request with `parse_request`, and the sidebar checks
 * every message with `isSnapshot` / `isReply` before it renders anything.
 */

export const PROTOCOL_NAME = 'torchdevice_magic';
export const PROTOCOL_VERSION = 1;
export const COMM_TARGET = 'torchdevice_magic';

/** What a row stands for in the kernel's namespace. */
export type RowKind = 'tensor' | 'parameter' | 'module' | 'optimizer' | 'container';

/** Per-device totals; memory is counted once per storage. */
export interface IDeviceTotal {
  device: string;
  /** Bytes the objects occupy on this device (0 on `meta`). */
  bytes: number;
  /** Bytes they would occupy on a real device (meta tensors). */
  would_need_bytes: number;
  /** CUDA only, and only when CUDA is already initialised; otherwise null. */
  allocated: number | null;
  reserved: number | null;
  capacity: number | null;
}

/** One entry of the target-device selector. */
export interface ITarget {
  device: string;
  enabled: boolean;
  /** Why the target is disabled (empty when enabled). */
  reason: string;
}

/** One record of the inventory. */
export interface IRow {
  name: string;
  root: string;
  kind: RowKind;
  type: string;
  device: string;
  devices: string[];
  dtype: string | null;
  shape: number[] | null;
  numel: number;
  bytes: number;
  would_need_bytes: number;
  grad_bytes: number;
  requires_grad: boolean;
  shares_with: string[];
  /** Only reachable through output history (`Out`, `_3`, ...). */
  hidden: boolean;
  /** A module/optimizer whose parts live on more than one device. */
  mixed: boolean;
  note: string;
  movable: boolean;
}

/** What a move or undo did. The kernel may add fields; these are always there. */
export interface IActionOutcome {
  action: 'move' | 'undo';
  ok: boolean;
  message: string;
  [extra: string]: unknown;
}

interface IEnvelope {
  protocol: string;
  version: number;
}

/** Kernel -> frontend: the current inventory. */
export interface ISnapshot extends IEnvelope {
  type: 'snapshot';
  /** Increases with every snapshot the kernel sends. */
  seq: number;
  /** False: torch is not imported yet, there is nothing to show. */
  torch_imported: boolean;
  devices: IDeviceTotal[];
  targets: ITarget[];
  default_target: string | null;
  warnings: string[];
  /** At most the kernel's row limit, biggest first. */
  rows: IRow[];
  /** How many records the inventory has (may exceed `rows.length`). */
  total_rows: number;
  can_undo: boolean;
  last_action: IActionOutcome | null;
}

/** Kernel -> frontend: the answer to one request. */
export interface IReply extends IEnvelope {
  type: 'reply';
  request_id: string;
  ok: boolean;
  message: string;
  outcome: IActionOutcome | null;
}

export type FromKernel = ISnapshot | IReply;

export interface IRefreshRequest extends IEnvelope {
  type: 'refresh';
  request_id: string;
}

export interface IMoveRequest extends IEnvelope {
  type: 'move';
  request_id: string;
  device: string;
  /** null moves everything movable. */
  names: string[] | null;
}

export interface IUndoRequest extends IEnvelope {
  type: 'undo';
  request_id: string;
}

export type Request = IRefreshRequest | IMoveRequest | IUndoRequest;

export function refreshRequest(requestId: string): IRefreshRequest {
  return {
    protocol: PROTOCOL_NAME,
    version: PROTOCOL_VERSION,
    type: 'refresh',
    request_id: requestId
  };
}

export function moveRequest(
  requestId: string,
  device: string,
  names: string[] | null
): IMoveRequest {
  return {
    protocol: PROTOCOL_NAME,
    version: PROTOCOL_VERSION,
    type: 'move',
    request_id: requestId,
    device,
    names: names === null ? null : [...names]
  };
}

export function undoRequest(requestId: string): IUndoRequest {
  return {
    protocol: PROTOCOL_NAME,
    version: PROTOCOL_VERSION,
    type: 'undo',
    request_id: requestId
  };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

const isInt = (v: unknown): boolean => typeof v === 'number' && Number.isInteger(v);
const isIntOrNull = (v: unknown): boolean => v === null || isInt(v);
const isStr = (v: unknown): boolean => typeof v === 'string';
const isBool = (v: unknown): boolean => typeof v === 'boolean';
const isStrList = (v: unknown): boolean => Array.isArray(v) && v.every(isStr);

function isRow(row: unknown): row is IRow {
  return (
    isObject(row) &&
    isStr(row.name) &&
    isStr(row.root) &&
    isStr(row.kind) &&
    isStr(row.type) &&
    isStr(row.device) &&
    isStrList(row.devices) &&
    (row.dtype === null || isStr(row.dtype)) &&
    (row.shape === null || (Array.isArray(row.shape) && row.shape.every(isInt))) &&
    isInt(row.numel) &&
    isInt(row.bytes) &&
    isInt(row.would_need_bytes) &&
    isInt(row.grad_bytes) &&
    isBool(row.requires_grad) &&
    isStrList(row.shares_with) &&
    isBool(row.hidden) &&
    isBool(row.mixed) &&
    isStr(row.note) &&
    isBool(row.movable)
  );
}

function isDeviceTotal(total: unknown): total is IDeviceTotal {
  return (
    isObject(total) &&
    isStr(total.device) &&
    isInt(total.bytes) &&
    isInt(total.would_need_bytes) &&
    isIntOrNull(total.allocated) &&
    isIntOrNull(total.reserved) &&
    isIntOrNull(total.capacity)
  );
}

function isTarget(target: unknown): target is ITarget {
  return isObject(target) && isStr(target.device) && isBool(target.enabled) && isStr(target.reason);
}

export function isActionOutcome(value: unknown): value is IActionOutcome {
  return (
    isObject(value) &&
    (value.action === 'move' || value.action === 'undo') &&
    isBool(value.ok) &&
    isStr(value.message)
  );
}

/** Why `message` is not a snapshot of this protocol version, or null if it is. */
export function snapshotProblem(message: unknown): string | null {
  if (!isObject(message)) {
    return 'not an object';
  }
  if (message.type !== 'snapshot') {
    return 'not a snapshot';
  }
  if (message.version !== PROTOCOL_VERSION) {
    return `protocol version ${String(message.version)} (this sidebar speaks ${PROTOCOL_VERSION})`;
  }
  if (!isInt(message.seq) || !isBool(message.torch_imported) || !isInt(message.total_rows)) {
    return 'seq, torch_imported or total_rows missing or mistyped';
  }
  if (!isBool(message.can_undo)) {
    return 'can_undo missing or mistyped';
  }
  if (!(message.default_target === null || isStr(message.default_target))) {
    return 'default_target mistyped';
  }
  if (!isStrList(message.warnings)) {
    return 'warnings must be a list of strings';
  }
  if (!Array.isArray(message.devices) || !message.devices.every(isDeviceTotal)) {
    return 'a device total is missing a field or mistyped';
  }
  if (!Array.isArray(message.targets) || !message.targets.every(isTarget)) {
    return 'a target is missing a field or mistyped';
  }
  if (!Array.isArray(message.rows)) {
    return 'rows must be a list';
  }
  const bad = message.rows.find(row => !isRow(row));
  if (bad !== undefined) {
    const name = isObject(bad) && isStr(bad.name) ? ` '${bad.name as string}'` : '';
    return `row${name} is missing a field or mistyped`;
  }
  const last = message.last_action;
  if (!(last === undefined || last === null || isActionOutcome(last))) {
    return 'last_action mistyped';
  }
  return null;
}

export function isSnapshot(message: unknown): message is ISnapshot {
  return snapshotProblem(message) === null;
}

export function isReply(message: unknown): message is IReply {
  return (
    isObject(message) &&
    message.type === 'reply' &&
    isStr(message.request_id) &&
    isBool(message.ok) &&
    isStr(message.message) &&
    (message.outcome === undefined || message.outcome === null || isActionOutcome(message.outcome))
  );
}
