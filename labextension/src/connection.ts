/**
 * The sidebar's end of the `torchdevice_magic` comm, for one notebook.
 *
 * Lifecycle:
 * - on every kernel the notebook gets, register the comm target (so a
 *   `%load_ext torchdevice_magic` run later can open a comm to us), check the
 *   kernel is Python, and -- once the notebook has been shown in the sidebar --
 *   open a comm ourselves (the "probe"). A kernel with the extension loaded
 *   answers with the first window (a `view`) without being asked; one without
 *   closes the comm at once (ipykernel has no such target): "not loaded".
 * - protocol v2: the sidebar asks for windows (sort, filter, page, target);
 *   after a cell the kernel sends a `delta` of that window, applied to the
 *   mirror (window.ts). A delta that does not follow the last message makes us
 *   ask for the window again.
 * - a kernel restart disposes every comm, `%unload_ext` sends `unloaded`: we
 *   forget the window and the status line, and show one state.
 * - requests carry ids; the kernel's `reply` with that id ends the request and
 *   its message goes to the status line.
 */

import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel, KernelMessage } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { oneLine } from './format';
import {
  COMM_TARGET,
  FromKernel,
  IOutcome,
  IReplyMessage,
  IWindowSpec,
  PROTOCOL_NAME,
  PROTOCOL_VERSION,
  ToKernel
} from './protocol';
import { ITimelineMessage, timelineProblem } from './timeline';
import { messageProblem } from './validate';
import { applyDelta, fromView, IMirror } from './window';

type Request = ToKernel;

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

export type ConnectionState =
  /** The notebook has no kernel. */
  | 'no-kernel'
  /** A kernel is there; we are waiting for it or checking its language. */
  | 'starting'
  /** The kernel's language is not Python. */
  | 'not-python'
  /** A comm is open (or opening); the first snapshot has not come yet. */
  | 'connecting'
  /** The kernel has no `torchdevice_magic` comm target. */
  | 'not-loaded'
  /** `%load_ext torchdevice_magic` is running. */
  | 'loading'
  /** A snapshot is there to show (it may say torch is not imported). */
  | 'ready'
  | 'restarting'
  | 'dead';

export type StatusKind = 'info' | 'ok' | 'error';

export interface IStatusLine {
  message: string;
  kind: StatusKind;
}

export interface IConnectionOptions {
  /**
   * How long the kernel must stay busy before the sidebar says so. ipykernel
   * reports busy for every message it handles, our own requests included;
   * without the delay the notice would flicker on every refresh.
   */
  busyDelayMs?: number;
}

/** The code the Load button runs, silently and outside the history. */
export const LOAD_CODE = '%load_ext torchdevice_magic';

type Comm = Kernel.IComm;

export function isPythonLanguage(language: string): boolean {
  return /^(i?python)/i.test(language.trim());
}

export class DeviceConnection {
  constructor(sessionContext: ISessionContext, options: IConnectionOptions = {}) {
    this._sessionContext = sessionContext;
    this._busyDelayMs = options.busyDelayMs ?? 300;
    this._clientId = Math.random().toString(36).slice(2, 10);
    sessionContext.kernelChanged.connect(this._onKernelChanged, this);
    sessionContext.statusChanged.connect(this._onStatusChanged, this);
    sessionContext.disposed.connect(this.dispose, this);
    this._attach(sessionContext.session?.kernel ?? null);
  }

  /** How many whole views and deltas came on this connection (browser tests read them). */
  readonly received = { view: 0, delta: 0 };

  /**
   * Every checked message from the kernel, whatever its type: parts that add a
   * message type to protocol.py (a timeline, a rerun) listen here.
   */
  get messageReceived(): ISignal<this, FromKernel> {
    return this._messageReceived;
  }

  /** Send a request of a type another part added to protocol.py; its reply ends it. */
  send(type: string, fields: Record<string, unknown>): string | null {
    const request = {
      protocol: PROTOCOL_NAME,
      version: PROTOCOL_VERSION,
      type,
      request_id: this._nextId(),
      ...fields
    } as unknown as Request;
    return this._request(request, null);
  }

  /** The kernel asks the notebook to run a cell again (the id of the cell). */
  get rerunRequested(): ISignal<this, string> {
    return this._rerunRequested;
  }

  /** Emitted whenever anything the panel shows has changed. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get state(): ConnectionState {
    return this._state;
  }

  /** The last memory timeline (timeline.ts), or null before the first. */
  get timeline(): ITimelineMessage | null {
    return this._timeline;
  }

  /** The window and header the kernel last sent (deltas applied); kept while busy. */
  get view(): IMirror | null {
    return this._view;
  }

  /** The kernel has been busy for a while (a cell is running). */
  get busy(): boolean {
    return this._busy;
  }

  /** The line under the table: the last reply or outcome, or a problem. */
  get status(): IStatusLine | null {
    return this._status;
  }

  /** The kernel's language as it reports it, once known. */
  get language(): string | null {
    return this._language;
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

  /** A comm is open, so requests can be sent. */
  get connected(): boolean {
    return this._comm !== null;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /**
   * The notebook is being shown: from now on, open a comm to its kernel
   * whenever there is none (a kernel-opened comm is adopted regardless).
   */
  activate(): void {
    if (this._isDisposed) {
      return;
    }
    this._wanted = true;
    this._maybeProbe();
  }

  refresh(): string | null {
    return this._request(refreshRequest(this._nextId()), null);
  }

  /** Ask the kernel for another window (sort, filter, page or target changed). */
  requestWindow(spec: IWindowSpec): string | null {
    this._spec = spec;
    return this._request(windowRequest(this._nextId(), spec), null);
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
      moveRequest(this._nextId(), device, names),
      `Moving ${what} to ${device}…`
    );
  }

  undo(): string | null {
    return this._request(undoRequest(this._nextId()), 'Undoing the last move…');
  }

  /** Run `%load_ext torchdevice_magic` in the kernel, then connect. */
  async loadExtension(): Promise<void> {
    const kernel = this._kernel;
    if (!kernel || this._state === 'loading') {
      return;
    }
    this._wanted = true;
    this._setState('loading');
    this._setStatus('Loading torchdevice_magic in this kernel…', 'info');
    let reply: KernelMessage.IExecuteReplyMsg;
    try {
      const future = kernel.requestExecute({
        code: LOAD_CODE,
        silent: true,
        store_history: false
      });
      reply = await future.done;
    } catch (error) {
      if (kernel === this._kernel && this._stillLoading()) {
        this._setState('not-loaded');
        this._setStatus(`Could not load torchdevice_magic: ${describeError(error)}`, 'error');
      }
      return;
    }
    if (kernel !== this._kernel || this._isDisposed) {
      return;
    }
    const content = reply.content;
    if (content.status !== 'ok') {
      if (this._stillLoading()) {
        this._setState('not-loaded');
      }
      const why =
        content.status === 'error'
          ? oneLine(`${content.ename}: ${content.evalue}`)
          : 'the kernel aborted the request';
      this._setStatus(`Could not load torchdevice_magic: ${why}`, 'error');
      return;
    }
    this._setStatus('torchdevice_magic is loaded in this kernel', 'ok');
    if (this._stillLoading()) {
      this._setState('starting');
      // The kernel opens a comm to us while loading; if that has not arrived
      // (it travels on another channel), open one ourselves.
      this._maybeProbe();
    }
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._detach();
    this._sessionContext.kernelChanged.disconnect(this._onKernelChanged, this);
    this._sessionContext.statusChanged.disconnect(this._onStatusChanged, this);
    this._sessionContext.disposed.disconnect(this.dispose, this);
    Signal.clearData(this);
  }

  // ---- kernel lifecycle ---------------------------------------------------

  private _onKernelChanged(
    _sender: ISessionContext,
    args: { newValue: Kernel.IKernelConnection | null }
  ): void {
    this._attach(args.newValue);
  }

  private _attach(kernel: Kernel.IKernelConnection | null): void {
    this._detach();
    this._generation += 1;
    this._kernel = kernel;
    if (!kernel) {
      this._setState('no-kernel');
      return;
    }
    kernel.registerCommTarget(COMM_TARGET, this._onCommOpened);
    this._setState(kernel.status === 'dead' ? 'dead' : 'starting');
    if (kernel.status === 'busy') {
      this._scheduleBusy();
    }
    void this._checkLanguage(kernel, this._generation);
  }

  private _detach(): void {
    const kernel = this._kernel;
    if (kernel && !kernel.isDisposed) {
      kernel.removeCommTarget(COMM_TARGET, this._onCommOpened);
    }
    this._dropComm(true);
    this._kernel = null;
    this._language = null;
    this._languageOk = false;
    this._setBusy(false);
    this._forgetSnapshot();
  }

  private async _checkLanguage(
    kernel: Kernel.IKernelConnection,
    generation: number
  ): Promise<void> {
    let language: string | null = null;
    try {
      const spec = await kernel.spec;
      language = spec?.language || null;
    } catch {
      // fall back to the kernel's own info below
    }
    if (!language) {
      try {
        const info = await kernel.info;
        language = info.language_info?.name || null;
      } catch {
        language = null;
      }
    }
    if (generation !== this._generation || this._isDisposed) {
      return;
    }
    this._language = language;
    // An unknown language is given the benefit of the doubt: the probe is
    // harmless, and a kernel without the target just closes the comm.
    if (language !== null && !isPythonLanguage(language) && !this._comm) {
      this._setState('not-python');
      return;
    }
    this._languageOk = true;
    this._maybeProbe();
    this._changed.emit();
  }

  private _onStatusChanged(_sender: ISessionContext, status: Kernel.Status): void {
    if (!this._kernel || this._isDisposed) {
      return;
    }
    switch (status) {
      case 'busy':
        this._scheduleBusy();
        break;
      case 'idle':
        this._setBusy(false);
        if (this._state === 'restarting' || this._state === 'dead') {
          this._setState('starting');
        }
        this._maybeProbe();
        break;
      case 'restarting':
      case 'autorestarting':
        // JupyterLab disposes every comm on restart without calling onClose.
        this._dropComm(false);
        this._forgetSnapshot();
        this._status = null; // no stale "Moved…" line after a restart
        this._setBusy(false);
        this._setState('restarting');
        break;
      case 'dead':
        this._dropComm(false);
        this._forgetSnapshot();
        this._setBusy(false);
        this._setState('dead');
        break;
      default:
        break;
    }
  }

  private _scheduleBusy(): void {
    if (this._busy || this._busyTimer !== null) {
      return;
    }
    if (this._busyDelayMs <= 0) {
      this._setBusy(true);
      return;
    }
    this._busyTimer = setTimeout(() => {
      this._busyTimer = null;
      if (this._kernel?.status === 'busy') {
        this._setBusy(true);
      }
    }, this._busyDelayMs);
  }

  private _setBusy(busy: boolean): void {
    if (this._busyTimer !== null) {
      clearTimeout(this._busyTimer);
      this._busyTimer = null;
    }
    if (this._busy !== busy) {
      this._busy = busy;
      this._changed.emit();
    }
  }

  // ---- the comm -------------------------------------------------------------

  private _maybeProbe(): void {
    const kernel = this._kernel;
    if (!kernel || !this._wanted || !this._languageOk || this._comm || this._isDisposed) {
      return;
    }
    // "not loaded" is an answer; ask again only when the user loads it.
    if (this._state !== 'starting') {
      return;
    }
    const status = kernel.status;
    if (status === 'dead' || status === 'restarting' || status === 'autorestarting') {
      return;
    }
    let comm: Comm;
    try {
      comm = kernel.createComm(COMM_TARGET);
    } catch (error) {
      this._setStatus(`Could not open a comm to the kernel: ${describeError(error)}`, 'error');
      return;
    }
    this._useComm(comm);
    this._setState('connecting');
    try {
      // opening is the request: the kernel answers with its first window
      comm.open({});
    } catch (error) {
      this._dropComm(false);
      this._setState('not-loaded');
      this._setStatus(`Could not open a comm to the kernel: ${describeError(error)}`, 'error');
    }
  }

  /** The kernel opened a comm to us (it ran `%load_ext torchdevice_magic`). */
  private _onCommOpened = (comm: Comm, msg: KernelMessage.ICommOpenMsg): void => {
    if (this._isDisposed) {
      comm.close();
      return;
    }
    this._languageOk = true;
    this._useComm(comm);
    const data: unknown = msg.content.data;
    if (messageProblem(data) === null) {
      this._onData(comm, data);
      return;
    }
    if (this._state !== 'ready') {
      this._setState('connecting');
    }
    this._send(refreshRequest(this._nextId()));
  };

  /** Make `comm` the one channel; close the one it replaces. */
  private _useComm(comm: Comm): void {
    if (this._comm === comm) {
      return;
    }
    this._dropComm(true);
    this._comm = comm;
    comm.onMsg = msg => {
      this._onData(comm, msg.content.data);
    };
    comm.onClose = () => {
      this._onCommClosed(comm);
    };
  }

  /**
   * Forget the current comm. `close` sends comm_close to the kernel; it is
   * false where the comm is already gone (restart, dead kernel).
   */
  private _dropComm(close: boolean): void {
    const comm = this._comm;
    if (!comm) {
      return;
    }
    this._comm = null;
    this._pending.clear();
    comm.onMsg = () => undefined;
    comm.onClose = () => undefined;
    if (close && !comm.isDisposed) {
      try {
        comm.close();
      } catch {
        // the kernel is gone; nothing to tell it
      }
    }
  }

  private _onCommClosed(comm: Comm): void {
    if (comm !== this._comm) {
      return;
    }
    this._comm = null;
    this._pending.clear();
    this._forgetSnapshot();
    const status = this._kernel?.status;
    if (status === 'restarting' || status === 'autorestarting' || status === 'dead') {
      return;
    }
    if (this._state !== 'loading') {
      this._setState('not-loaded');
    }
  }

  private _onData(comm: Comm, data: unknown): void {
    if (comm !== this._comm || this._isDisposed) {
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
    this._messageReceived.emit(message);
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
        // the memory chart's rows (timeline.ts); rows it cannot draw are dropped
        if (timelineProblem(message) === null) {
          this._timeline = message as unknown as ITimelineMessage;
          this._changed.emit();
        }
        break;
      case 'rerun':
        if (message.cell_id.length > 0) {
          this._rerunRequested.emit(message.cell_id);
        }
        break;
      case 'unloaded':
        // one clear state: not loaded, no window, no stale status line
        this._dropComm(false);
        this._forgetSnapshot();
        this._pending.clear();
        this._status = null;
        this._state = 'not-loaded';
        this._changed.emit();
        break;
    }
  }

  private _onView(view: IMirror): void {
    this._view = view;
    this._spec = { ...view.spec };
    // Announce an action that happened elsewhere (the notebook's widget
    // table, %%devicecheck): a last_action we have not shown yet.
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
    this._state = 'ready';
    this._changed.emit();
  }

  private _onReply(reply: IReplyMessage): void {
    const request = this._pending.get(reply.request_id);
    this._pending.delete(reply.request_id);
    const outcome: IOutcome | null = reply.outcome ?? null;
    if (outcome) {
      this._replyActionKey = JSON.stringify(outcome);
    }
    let message = oneLine(reply.message || outcome?.message || '');
    if (outcome && outcome.skipped.length > 0) {
      // skip reasons with the result, in words
      const shown = outcome.skipped.slice(0, 3).map(s => `${s.name}: ${s.reason}`);
      const more = outcome.skipped.length > 3 ? ` (+${outcome.skipped.length - 3} more)` : '';
      message += ` — skipped ${shown.join('; ')}${more}`;
    }
    if (!reply.ok || outcome?.ok === false) {
      this._setStatus(message || 'The kernel refused the request', 'error');
    } else if (outcome || (request && (request.type === 'move' || request.type === 'undo'))) {
      this._setStatus(message || 'Done', 'ok');
    } else {
      // A refresh's or a window's view speaks for itself; keep the earlier news.
      this._changed.emit();
    }
  }

  private _request(request: Request, pendingMessage: string | null): string | null {
    if (!this._comm) {
      this._setStatus('Not connected to torchdevice_magic in this kernel', 'error');
      return null;
    }
    if (!this._send(request)) {
      return null;
    }
    this._pending.set((request as { request_id: string }).request_id, request);
    if (pendingMessage) {
      this._setStatus(pendingMessage, 'info');
    } else {
      this._changed.emit();
    }
    return (request as { request_id: string }).request_id;
  }

  private _send(request: Request): boolean {
    const comm = this._comm;
    if (!comm) {
      return false;
    }
    try {
      comm.send({ ...request } as unknown as Parameters<Comm['send']>[0]);
      return true;
    } catch (error) {
      this._setStatus(`Could not send to the kernel: ${describeError(error)}`, 'error');
      return false;
    }
  }

  // ---- small helpers --------------------------------------------------------

  /** Read afresh: the state can change while `loadExtension` awaits. */
  private _stillLoading(): boolean {
    return this._state === 'loading';
  }

  private _forgetSnapshot(): void {
    this._view = null;
    this._timeline = null;
    this._snapshotActionKey = undefined;
  }

  private _setState(state: ConnectionState): void {
    if (this._state !== state) {
      this._state = state;
      this._changed.emit();
    }
  }

  private _setStatus(message: string, kind: StatusKind): void {
    this._status = { message: oneLine(message), kind };
    this._changed.emit();
  }

  private _nextId(): string {
    this._counter += 1;
    return `tdm-${this._clientId}-${this._counter}`;
  }

  private _sessionContext: ISessionContext;
  private _kernel: Kernel.IKernelConnection | null = null;
  private _comm: Comm | null = null;
  private _state: ConnectionState = 'no-kernel';
  private _view: IMirror | null = null;
  private _timeline: ITimelineMessage | null = null;
  private _spec: IWindowSpec = { ...DEFAULT_SPEC };
  private _status: IStatusLine | null = null;
  private _language: string | null = null;
  private _languageOk = false;
  private _wanted = false;
  private _busy = false;
  private _busyTimer: ReturnType<typeof setTimeout> | null = null;
  private _busyDelayMs: number;
  /** The previous snapshot's last_action (undefined: no snapshot on this comm yet). */
  private _snapshotActionKey: string | null | undefined = undefined;
  /** The outcome of the last reply shown. */
  private _replyActionKey: string | null = null;
  private _pending = new Map<string, Request>();
  private _generation = 0;
  private _counter = 0;
  private _clientId: string;
  private _isDisposed = false;
  private _changed = new Signal<this, void>(this);
  private _messageReceived = new Signal<this, FromKernel>(this);
  private _rerunRequested = new Signal<this, string>(this);
}

function describeError(error: unknown): string {
  if (error instanceof Error) {
    return oneLine(error.message) || error.name;
  }
  return oneLine(String(error));
}
