/**
 * What the sidebar asks the kernel: the request messages (the frontend rows
 * of protocol.py), the first window's spec, the requests still waiting for
 * their reply, and a reply put in words for the status line.
 */

import { oneLine } from './format';
import { IReplyMessage, IWindowSpec, PROTOCOL_NAME, PROTOCOL_VERSION, ToKernel } from './protocol';
import type { IStatusLine } from './tokens';

export type Request = ToKernel;

function envelope<T extends Request['type']>(type: T, fields: Record<string, unknown>): Request {
  return { protocol: PROTOCOL_NAME, version: PROTOCOL_VERSION, type, ...fields } as Request;
}

export function refreshRequest(requestId: string): Request {
  return envelope('refresh', { request_id: requestId });
}

export function undoRequest(requestId: string): Request {
  return envelope('undo', { request_id: requestId });
}

export function moveRequest(requestId: string, device: string, names: string[] | null): Request {
  return envelope('move', { request_id: requestId, device, names });
}

export function windowRequest(requestId: string, spec: IWindowSpec): Request {
  return envelope('window', { request_id: requestId, spec });
}

/** The window the kernel sends first: the 200 biggest rows. */
export const DEFAULT_SPEC: IWindowSpec = {
  sort: 'size',
  reverse: false,
  filter: '',
  offset: 0,
  limit: 200,
  target: null
};

/** Requests sent and not answered yet, by id (ids are unique to this sidebar). */
export class PendingRequests {
  /** A fresh request id. */
  nextId(): string {
    this._counter += 1;
    return `tdm-${this._clientId}-${this._counter}`;
  }

  add(request: Request): string {
    const id = (request as { request_id: string }).request_id;
    this._pending.set(id, request);
    return id;
  }

  /** The request `id` answers, now answered. */
  take(id: string): Request | undefined {
    const request = this._pending.get(id);
    this._pending.delete(id);
    return request;
  }

  /** The comm they went on is gone: no reply will come. */
  clear(): void {
    this._pending.clear();
  }

  /** A move or undo was sent and its reply has not come yet. */
  get actionPending(): boolean {
    for (const request of this._pending.values()) {
      if (request.type === 'move' || request.type === 'undo') {
        return true;
      }
    }
    return false;
  }

  private _pending = new Map<string, Request>();
  private _counter = 0;
  private _clientId = Math.random().toString(36).slice(2, 10);
}

/**
 * The status line a reply makes (its message, what was skipped and why, in
 * words), or null where the window it brings speaks for itself (a refresh).
 */
export function replyLine(reply: IReplyMessage, request: Request | undefined): IStatusLine | null {
  const outcome = reply.outcome ?? null;
  let message = oneLine(reply.message || outcome?.message || '');
  // the kernel's message names up to three skipped objects as "name (reason)": say only the others
  const unnamed = (outcome?.skipped ?? []).filter(s => !message.includes(`${s.name} (`));
  if (unnamed.length > 0) {
    const shown = unnamed.slice(0, 3).map(s => `${s.name}: ${s.reason}`);
    const more = unnamed.length > 3 ? ` (+${unnamed.length - 3} more)` : '';
    message += ` — skipped ${shown.join('; ')}${more}`;
  }
  if (!reply.ok || outcome?.ok === false) {
    return { message: message || 'The kernel refused the request', kind: 'error' };
  }
  if (outcome || (request && (request.type === 'move' || request.type === 'undo'))) {
    return { message: message || 'Done', kind: 'ok' };
  }
  return null;
}
