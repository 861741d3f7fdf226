/**
 * The sidebar's end of the `torchdevice_magic` protocol, for one notebook,
 * over the comm transport (kernel.ts); the panel sees it as an
 * `IDeviceSource` (tokens.ts).
 *
 * - protocol v3: the sidebar asks for windows (sort, filter, page, target);
 *   after a cell the kernel sends a `delta` of that window, applied to the
 *   mirror (window.ts), with the memory chart's new rows inside it (one
 *   message per cell). A delta that does not follow the last message makes us
 *   ask for the window again.
 * - the transport dropping the comm (restart, dead kernel, another kernel)
 *   and `%unload_ext` (the kernel sends `unloaded`) make us forget the window
 *   and the status line, and show one state.
 * - requests carry ids; the kernel's `reply` with that id ends the request and
 *   its message goes to the status line.
 */

import type { ISessionContext } from '@jupyterlab/apputils';
import { Signal } from '@lumino/signaling';

import { oneLine } from './format';
import { DropReason, IKernelChannelOptions, KernelChannel } from './kernel';
import {
  FromKernel,
  IEnginesMessage,
  IReplyMessage,
  ITimeline,
  IWindowSpec,
  PROTOCOL_NAME,
  PROTOCOL_VERSION
} from './protocol';
import {
  DEFAULT_SPEC,
  moveRequest,
  PendingRequests,
  refreshRequest,
  replyLine,
  Request,
  undoRequest,
  windowRequest
} from './requests';
import { ITimelineMessage, mergeTimeline, timelineProblem } from './timeline';
import type { ConnectionState, IDeviceSource, IStatusLine, StatusKind } from './tokens';
import { messageProblem } from './validate';
import { applyDelta, fromView, IMirror } from './window';

export type IConnectionOptions = IKernelChannelOptions;

/** What a status line from before a refresh starts with. */
export const EARLIER_NEWS = 'last action, before the refresh: ';

export class DeviceConnection implements IDeviceSource {
  constructor(sessionContext: ISessionContext, options: IConnectionOptions = {}) {
    this._sessionContext = sessionContext;
    const channel = new KernelChannel(sessionContext, options);
    this._channel = channel;
    channel.changed.connect(() => this.changed.emit(), this);
    channel.news.connect((_, line) => this._setStatus(line.message, line.kind), this);
    channel.dataReceived.connect((_, data) => this._onData(data), this);
    channel.kernelOpened.connect((_, data) => this._onKernelOpened(data), this);
    channel.dropped.connect((_, reason) => this._onDropped(reason), this);
    sessionContext.disposed.connect(this.dispose, this);
  }

  /** How many whole views and deltas came on this connection (browser tests read them). */
  readonly received = { view: 0, delta: 0 };

  /**
   * Every checked message from the kernel, whatever its type: parts that add a
   * message type to protocol.py (a timeline, a rerun) listen here.
   */
  readonly messageReceived = new Signal<this, FromKernel>(this);

  /** Send a request of a type another part added to protocol.py; its reply ends it. */
  send(type: string, fields: Record<string, unknown>): string | null {
    const request = {
      protocol: PROTOCOL_NAME,
      version: PROTOCOL_VERSION,
      type,
      request_id: this._pending.nextId(),
      ...fields
    } as unknown as Request;
    return this._request(request, null);
  }

  /** The kernel asks the notebook to run a cell again (the id of the cell). */
  readonly rerunRequested = new Signal<this, string>(this);

  /** Emitted whenever anything the panel shows has changed. */
  readonly changed = new Signal<this, void>(this);

  get state(): ConnectionState {
    return this._channel.state;
  }

  /** The memory chart's rows so far (timeline.ts), or null before the first. */
  get timeline(): ITimelineMessage | null {
    return this._timeline;
  }

  /** Every ipyparallel engine's summary as the kernel last gathered it, or null. */
  get engines(): IEnginesMessage | null {
    return this._engines;
  }

  /**
   * The kernel has an open ipyparallel client (it says so when that changes;
   * false until it does): only then is there anything to gather.
   */
  get enginesReachable(): boolean {
    return this._enginesReachable;
  }

  /**
   * Gather every engine's summary (and the objects of engine `expand`); the
   * kernel answers with an `engines` message.
   */
  requestEngines(expand: number | null): string | null {
    return this.send('gather_engines', { expand });
  }

  /** The window and header the kernel last sent (deltas applied); kept while busy. */
  get view(): IMirror | null {
    return this._view;
  }

  /** The kernel has been busy for a while (a cell is running). */
  get busy(): boolean {
    return this._channel.busy;
  }

  /** The line under the table: the last reply or outcome, or a problem. */
  get status(): IStatusLine | null {
    return this._status;
  }

  /** The kernel's language as it reports it, once known. */
  get language(): string | null {
    return this._channel.language;
  }

  /** A move or undo was sent and its reply has not come yet. */
  get actionPending(): boolean {
    return this._pending.actionPending;
  }

  /** A comm is open, so requests can be sent. */
  get connected(): boolean {
    return this._channel.connected;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /**
   * The notebook is being shown: from now on, open a comm to its kernel
   * whenever there is none (a kernel-opened comm is adopted regardless).
   */
  activate(): void {
    if (!this._isDisposed) {
      this._channel.activate();
    }
  }

  refresh(): string | null {
    const id = this._request(refreshRequest(this._pending.nextId()), null);
    if (id !== null && this._engines?.available) {
      // the engines shown are refreshed too: one small message per engine
      this.requestEngines(this._engines.expanded);
    }
    return id;
  }

  /** Ask the kernel for another window (sort, filter, page or target changed). */
  requestWindow(spec: IWindowSpec): string | null {
    this._spec = spec;
    return this._request(windowRequest(this._pending.nextId(), spec), null);
  }

  /** The window this sidebar wants (the kernel's first window until it asks for another). */
  get spec(): IWindowSpec {
    return this._spec;
  }

  /** Move the named objects, or everything movable when `names` is null. */
  move(device: string, names: string[] | null): string | null {
    const what =
      names === null ? 'everything' : names.length === 1 ? names[0] : `${names.length} objects`;
    return this._request(
      moveRequest(this._pending.nextId(), device, names),
      `Moving ${what} to ${device}…`
    );
  }

  undo(): string | null {
    return this._request(undoRequest(this._pending.nextId()), 'Undoing the last move…');
  }

  /** Run `%load_ext torchdevice_magic` in the kernel, then connect. */
  loadExtension(): Promise<void> {
    return this._channel.loadExtension();
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._channel.dispose();
    this._sessionContext.disposed.disconnect(this.dispose, this);
    Signal.clearData(this);
  }

  // ---- what the transport reports ---------------------------------------------

  /** The kernel opened the comm: its data is the first window, or we ask for one. */
  private _onKernelOpened(data: unknown): void {
    if (this._isDisposed) {
      return;
    }
    if (messageProblem(data) === null) {
      this._onData(data);
      return;
    }
    this._channel.markConnecting();
    this._channel.send(
      refreshRequest(this._pending.nextId()) as unknown as Record<string, unknown>
    );
  }

  private _onDropped(reason: DropReason): void {
    this._pending.clear();
    if (reason === 'replaced') {
      return;
    }
    this._forgetSnapshot();
    if (reason === 'restarting') {
      this._status = null; // no stale "Moved…" line after a restart
    }
  }

  // ---- the protocol ------------------------------------------------------------

  private _onData(data: unknown): void {
    if (this._isDisposed) {
      return;
    }
    const problem = messageProblem(data);
    if (problem !== null) {
      this._setStatus(`The kernel sent a message this sidebar cannot read: ${problem}`, 'error');
      return;
    }
    const message = data as FromKernel;
    if (message.type !== 'view' && message.type !== 'delta' && this._view) {
      // every kernel message is numbered in the comm's sequence: the next delta's base
      this._view = { ...this._view, seq: message.seq };
    }
    this.messageReceived.emit(message);
    if ((message.type === 'view' || message.type === 'delta') && message.timeline) {
      // the memory chart's new rows travel inside the cell's view or delta
      this._onTimeline(message.seq, message.timeline);
    }
    switch (message.type) {
      case 'view':
        this.received.view += 1;
        this._onView(fromView(message));
        break;
      case 'delta': {
        this.received.delta += 1;
        const next = this._view ? applyDelta(this._view, message) : null;
        if (next === null) {
          // out of step (a message lost or reordered): ask for the whole window
          this.requestWindow(this._spec);
          return;
        }
        this._onView(next);
        break;
      }
      case 'reply':
        this._onReply(message);
        break;
      case 'timeline':
        // the chart's new rows by themselves: the sidebar's window had nothing to say
        this._onTimeline(message.seq, message);
        this.changed.emit();
        break;
      case 'engines':
        this._engines = message;
        this.changed.emit();
        break;
      case 'engines_reachable':
        this._enginesReachable = message.available;
        if (!message.available) {
          this._engines = null; // a later client's engines are not these
        }
        this.changed.emit();
        break;
      case 'rerun':
        if (message.cell_id.length > 0) {
          this.rerunRequested.emit(message.cell_id);
        }
        break;
      case 'unloaded':
        // one clear state: not loaded, no window, no stale status line
        this._channel.markUnloaded();
        this._forgetSnapshot();
        this._pending.clear();
        this._status = null;
        this.changed.emit();
        break;
    }
  }

  private _onView(view: IMirror): void {
    this._view = view;
    this._spec = { ...view.spec };
    // Announce an action that happened elsewhere (the fix button under a
    // diagnosis, the notebook's widget table, %%devicecheck --to): a
    // last_action we have not shown yet, from a view or a delta.
    const last = view.lastAction ?? null;
    const key = last ? JSON.stringify(last) : null;
    const previous = this._snapshotActionKey;
    this._snapshotActionKey = key;
    if (
      last !== null &&
      previous !== undefined &&
      key !== previous &&
      key !== this._replyActionKey &&
      !this.actionPending
    ) {
      const message = oneLine(last.message);
      if (message && message !== this._status?.message) {
        this._status = { message, kind: last.ok ? 'ok' : 'error' };
      }
    }
    this._channel.markReady();
    this.changed.emit();
  }

  /**
   * The memory chart's new rows (timeline.ts), carried by the message numbered
   * `seq`, added to those it has; rows it cannot draw are dropped.
   */
  private _onTimeline(seq: number, update: ITimeline): void {
    const message = {
      protocol: PROTOCOL_NAME,
      version: PROTOCOL_VERSION,
      type: 'timeline',
      seq,
      rows: update.rows,
      follows: update.follows
    };
    if (timelineProblem(message) === null) {
      this._timeline = mergeTimeline(this._timeline, message as unknown as ITimelineMessage);
    }
  }

  private _onReply(reply: IReplyMessage): void {
    const request = this._pending.take(reply.request_id);
    if (reply.outcome) {
      this._replyActionKey = JSON.stringify(reply.outcome);
    }
    const line = replyLine(reply, request);
    if (line) {
      this._setStatus(line.message, line.kind);
    } else {
      // A refresh's or a window's view speaks for itself; the earlier news stays, and after a
      // refresh it is marked as earlier (muted), as the widget table marks it
      const news = this._status;
      if (request?.type === 'refresh' && news && news.kind !== 'info') {
        this._status = { message: `${EARLIER_NEWS}${news.message}`, kind: 'info' };
      }
      this.changed.emit();
    }
  }

  private _request(request: Request, pendingMessage: string | null): string | null {
    if (!this._channel.connected) {
      this._setStatus('Not connected to torchdevice_magic in this kernel', 'error');
      return null;
    }
    if (!this._channel.send(request as unknown as Record<string, unknown>)) {
      return null;
    }
    const id = this._pending.add(request);
    if (pendingMessage) {
      this._setStatus(pendingMessage, 'info');
    } else {
      this.changed.emit();
    }
    return id;
  }

  // ---- small helpers --------------------------------------------------------

  private _forgetSnapshot(): void {
    this._view = null;
    this._timeline = null;
    this._engines = null;
    this._enginesReachable = false;
    this._snapshotActionKey = undefined;
  }

  private _setStatus(message: string, kind: StatusKind): void {
    this._status = { message: oneLine(message), kind };
    this.changed.emit();
  }

  private _sessionContext: ISessionContext;
  private _channel: KernelChannel;
  private _view: IMirror | null = null;
  private _timeline: ITimelineMessage | null = null;
  private _engines: IEnginesMessage | null = null;
  private _enginesReachable = false;
  private _spec: IWindowSpec = { ...DEFAULT_SPEC };
  private _status: IStatusLine | null = null;
  /** The previous snapshot's last_action (undefined: no snapshot on this comm yet). */
  private _snapshotActionKey: string | null | undefined = undefined;
  /** The outcome of the last reply shown. */
  private _replyActionKey: string | null = null;
  private _pending = new PendingRequests();
  private _isDisposed = false;
}
