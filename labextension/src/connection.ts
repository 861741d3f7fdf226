/**
 * The sidebar's end of the `torchdevice_magic` comm, for one notebook.
 *
 * Lifecycle:
 * - on every kernel the notebook gets, register the comm target (so a
 *   `%load_ext torchdevice_magic` run later can open a comm to us), check the
 *   kernel is Python, and -- once the notebook has been shown in the sidebar --
 *   open a comm ourselves with a `refresh` request (the "probe"). A kernel with
 *   the extension loaded answers with a snapshot; one without closes the comm
 *   at once (ipykernel has no such target), which means "not loaded".
 * - a kernel restart disposes every comm: we forget the snapshot and probe
 *   again when the kernel is idle; a kernel change starts over with the new one.
 * - requests carry ids; the kernel's `reply` with that id ends the request and
 *   its message goes to the status line.
 */

import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel, KernelMessage } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { oneLine } from './format';
import { isRerunMessage } from './rerun';
import {
  COMM_TARGET,
  IActionOutcome,
  IReply,
  ISnapshot,
  isReply,
  moveRequest,
  refreshRequest,
  Request,
  snapshotProblem,
  undoRequest
} from './protocol';
import { isTimelineLike, ITimelineMessage, timelineProblem } from './timeline';

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

  /** The last snapshot; kept while the kernel is busy. */
  get snapshot(): ISnapshot | null {
    return this._snapshot;
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
      if (request.type !== 'refresh') {
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
    const request = refreshRequest(this._nextId());
    try {
      comm.open({ ...request });
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
    if (isSnapshotLike(data)) {
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
    this._lastSeq = null;
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
    this._lastSeq = null;
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
    this._lastSeq = null;
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
    if (isReply(data)) {
      this._onReply(data);
      return;
    }
    if (isTimelineLike(data)) {
      // the memory chart's rows (timeline.ts); a message it cannot read is dropped
      if (timelineProblem(data) === null) {
        this._timeline = data as unknown as ITimelineMessage;
        this._changed.emit();
      }
      return;
    }
    if (isSnapshotLike(data)) {
      const problem = snapshotProblem(data);
      if (problem !== null) {
        this._setStatus(`The kernel sent a snapshot this sidebar cannot read: ${problem}`, 'error');
        return;
      }
      this._onSnapshot(data as unknown as ISnapshot);
      return;
    }
    if (isRerunMessage(data)) {
      this._rerunRequested.emit(data.cell_id);
      return;
    }
    console.warn('torchdevice-magic: ignoring an unexpected comm message', data);
  }

  private _onSnapshot(snapshot: ISnapshot): void {
    if (this._lastSeq !== null && snapshot.seq < this._lastSeq) {
      return; // an older snapshot overtaken by a newer one
    }
    this._lastSeq = snapshot.seq;
    this._snapshot = snapshot;
    // Announce an action that happened elsewhere (the notebook's widget
    // table, %%devicecheck): the snapshot's last_action changed since the
    // previous snapshot and is not the outcome of a reply we already showed.
    // A failed request leaves last_action as it was, so it never overwrites
    // the error the reply put on the status line.
    const last = snapshot.last_action ?? null;
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

  private _onReply(reply: IReply): void {
    const request = this._pending.get(reply.request_id);
    this._pending.delete(reply.request_id);
    const outcome: IActionOutcome | null = reply.outcome ?? null;
    if (outcome) {
      this._replyActionKey = JSON.stringify(outcome);
    }
    const message = oneLine(reply.message || outcome?.message || '');
    if (!reply.ok || outcome?.ok === false) {
      this._setStatus(message || 'The kernel refused the request', 'error');
    } else if (outcome || (request && request.type !== 'refresh')) {
      this._setStatus(message || 'Done', 'ok');
    } else {
      // A refresh's snapshot speaks for itself; keep the earlier news.
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
    this._pending.set(request.request_id, request);
    if (pendingMessage) {
      this._setStatus(pendingMessage, 'info');
    } else {
      this._changed.emit();
    }
    return request.request_id;
  }

  private _send(request: Request): boolean {
    const comm = this._comm;
    if (!comm) {
      return false;
    }
    try {
      comm.send({ ...request });
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
    this._snapshot = null;
    this._lastSeq = null;
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
  private _snapshot: ISnapshot | null = null;
  private _timeline: ITimelineMessage | null = null;
  private _status: IStatusLine | null = null;
  private _language: string | null = null;
  private _languageOk = false;
  private _wanted = false;
  private _busy = false;
  private _busyTimer: ReturnType<typeof setTimeout> | null = null;
  private _busyDelayMs: number;
  private _lastSeq: number | null = null;
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
  private _rerunRequested = new Signal<this, string>(this);
}

function isSnapshotLike(data: unknown): data is Record<string, unknown> {
  return (
    typeof data === 'object' &&
    data !== null &&
    (data as Record<string, unknown>).type === 'snapshot'
  );
}

function describeError(error: unknown): string {
  if (error instanceof Error) {
    return oneLine(error.message) || error.name;
  }
  return oneLine(String(error));
}
