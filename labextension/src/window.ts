/**
 * The window the sidebar mirrors: the kernel's last `view`, with each `delta`
 * applied (as `apply_delta` in torchdevice_magic/viewmodel.py does; a jest test
 * replays a sequence the kernel generated and compares with its fresh window).
 */

import {
  IDeltaMessage,
  IHeader,
  IOutcome,
  IRow,
  ISplice,
  IViewMessage,
  IWindowSpec
} from './protocol';

export interface IMirror {
  seq: number;
  header: IHeader;
  spec: IWindowSpec;
  rows: Map<string, IRow>;
  order: string[];
  matching: number;
  total: number;
  lastAction: IOutcome | null;
}

export function fromView(view: IViewMessage): IMirror {
  const rows = new Map<string, IRow>();
  for (const row of view.window.rows) {
    rows.set(row.key, row);
  }
  return {
    seq: view.seq,
    header: view.header,
    spec: view.window.spec,
    rows,
    order: view.window.rows.map(row => row.key),
    matching: view.window.matching,
    total: view.window.total,
    lastAction: view.last_action
  };
}

/**
 * The mirror after `delta`, or null when the delta does not follow the message
 * the mirror last saw (then the sidebar asks for a whole window again).
 */
export function applyDelta(mirror: IMirror, delta: IDeltaMessage): IMirror | null {
  if (delta.base !== mirror.seq) {
    return null;
  }
  const rows = new Map(mirror.rows);
  for (const key of delta.window.remove) {
    rows.delete(key);
  }
  for (const row of delta.window.upsert) {
    rows.set(row.key, row);
  }
  const order = applySplices(mirror.order, delta.window.splices);
  if (!order.every(key => rows.has(key))) {
    return null;
  }
  return {
    ...mirror,
    seq: delta.seq,
    // only the fields that changed come (absent: unchanged); the cast says so to the types
    header: delta.header ? ({ ...mirror.header, ...delta.header } as IHeader) : mirror.header,
    // a move or undo made since the last message, here or elsewhere (the fix button,
    // %%devicecheck --to, the widget table); null: none since
    lastAction: delta.last_action ?? mirror.lastAction,
    rows,
    order,
    matching: delta.window.matching,
    total: delta.window.total
  };
}

/** The key order after `splices`, each applied to the result of the one before. */
export function applySplices(order: string[], splices: ISplice[]): string[] {
  if (splices.length === 0) {
    return order;
  }
  const keys = [...order];
  for (const splice of splices) {
    keys.splice(splice.at, splice.remove, ...splice.insert);
  }
  return keys;
}

export function orderedRows(mirror: IMirror): IRow[] {
  return mirror.order.map(key => mirror.rows.get(key)!);
}
