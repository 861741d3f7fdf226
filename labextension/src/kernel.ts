/**
 * The transport under the sidebar: one notebook's kernel and the
 * `torchdevice_magic` comm to it. It knows the kernel's lifecycle and the
 * comm, not what travels on it (connection.ts reads and writes the messages).
 *
 * - on every kernel the notebook gets, register the comm target (so a
 *   `%load_ext torchdevice_magic` run later can open a comm to us), check the
 *   kernel is Python, and -- once the notebook has been shown in the sidebar --
 *   open a comm ourselves (the "probe"). A kernel with the extension loaded
 *   answers with the first window without being asked; one without closes the
 *   comm at once (ipykernel has no such target): "not loaded".
 * - a kernel restart disposes every comm: the window the sidebar mirrors is
 *   dropped with it (`dropped`), and the state says why.
 * - the kernel counts as busy only once it has stayed busy for a while.
 */

import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel, KernelMessage } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { oneLine } from './format';
import { COMM_TARGET } from './protocol';
import type { ConnectionState, IStatusLine, StatusKind } from './tokens';

/** The code the Load button runs, silently and outside the history. */
export const LOAD_CODE = '%load_ext torchdevice_magic';

export function isPythonLanguage(language: string): boolean {
  return /^(i?python)/i.test(language.trim());
}

export interface IKernelChannelOptions {
  /**
   * How long the kernel must stay busy before the sidebar says so. ipykernel
   * reports busy for every message it handles, our own requests included;
   * without the delay the notice would flicker on every refresh.
   */
  busyDelayMs?: number;
}

/**
 * Why the comm went away. 'replaced': a new comm took its place (the window
 * the sidebar mirrors is still right); every other reason makes it stale.
 */
export type DropReason = 'replaced' | 'closed' | 'detached' | 'restarting' | 'dead';

type Comm = Kernel.IComm;

export class KernelChannel {
  constructor(sessionContext: ISessionContext, options: IKernelChannelOptions = {}) {
    this._sessionContext = sessionContext;
    this._busyDelayMs = options.busyDelayMs ?? 300;
    sessionContext.kernelChanged.connect(this._onKernelChanged, this);
    sessionContext.statusChanged.connect(this._onStatusChanged, this);
    this._attach(sessionContext.session?.kernel ?? null);
  }

  /** The state, the busy flag or the language changed. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Data arrived on the current comm (unchecked: connection.ts checks it). */
  get dataReceived(): ISignal<this, unknown> {
    return this._dataReceived;
  }

  /** The kernel opened a comm to us; its opening data (unchecked). */
  get kernelOpened(): ISignal<this, unknown> {
    return this._kernelOpened;
  }

  /** The comm went away (see DropReason); requests in flight on it are lost. */
  get dropped(): ISignal<this, DropReason> {
    return this._dropped;
  }

  /** A line for the status line: loading, or something that went wrong. */
  get news(): ISignal<this, IStatusLine> {
    return this._news;
  }

  /** Every state but 'ready', which the connection sets when a window arrives. */
  get state(): ConnectionState {
    return this._state;
  }

  get busy(): boolean {
    return this._busy;
  }

  get language(): string | null {
    return this._language;
  }

  /** A comm is open, so data can be sent. */
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

  // The connection reads the messages, so it moves these states; it announces
  // the change itself, with the window or the cleared status that goes with it.

  /** A window arrived on the open comm. */
  markReady(): void {
    this._state = 'ready';
  }

  /** The comm opened without a first window: the connection asks for one. */
  markConnecting(): void {
    if (this._state !== 'ready') {
      this._setState('connecting');
    }
  }

  /** The kernel said it unloaded the extension: forget the comm (it closes it itself). */
  markUnloaded(): void {
    this._dropComm(false, null);
    this._state = 'not-loaded';
  }

  /** Put `data` on the comm; false (and news saying why) when it cannot go. */
  send(data: Record<string, unknown>): boolean {
    const comm = this._comm;
    if (!comm) {
      return false;
    }
    try {
      comm.send({ ...data } as Parameters<Comm['send']>[0]);
      return true;
    } catch (error) {
      this._tell(`Could not send to the kernel: ${describeError(error)}`, 'error');
      return false;
    }
  }

  /** Run `%load_ext torchdevice_magic` in the kernel, then connect. */
  async loadExtension(): Promise<void> {
    const kernel = this._kernel;
    if (!kernel || this._state === 'loading') {
      return;
    }
    this._wanted = true;
    this._setState('loading');
    this._tell('Loading torchdevice_magic in this kernel…', 'info');
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
        this._tell(`Could not load torchdevice_magic: ${describeError(error)}`, 'error');
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
      this._tell(`Could not load torchdevice_magic: ${why}`, 'error');
      return;
    }
    this._tell('torchdevice_magic is loaded in this kernel', 'ok');
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
    this._dropComm(true, 'detached');
    this._kernel = null;
    this._language = null;
    this._languageOk = false;
    this._setBusy(false);
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
        this._dropComm(false, 'restarting');
        this._setBusy(false);
        this._setState('restarting');
        break;
      case 'dead':
        this._dropComm(false, 'dead');
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
      this._tell(`Could not open a comm to the kernel: ${describeError(error)}`, 'error');
      return;
    }
    this._useComm(comm);
    this._setState('connecting');
    try {
      // opening is the request: the kernel answers with its first window
      comm.open({});
    } catch (error) {
      this._dropComm(false, null);
      this._setState('not-loaded');
      this._tell(`Could not open a comm to the kernel: ${describeError(error)}`, 'error');
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
    this._kernelOpened.emit(msg.content.data);
  };

  /** Make `comm` the one channel; close the one it replaces. */
  private _useComm(comm: Comm): void {
    if (this._comm === comm) {
      return;
    }
    this._dropComm(true, 'replaced');
    this._comm = comm;
    comm.onMsg = msg => {
      if (comm === this._comm && !this._isDisposed) {
        this._dataReceived.emit(msg.content.data);
      }
    };
    comm.onClose = () => {
      this._onCommClosed(comm);
    };
  }

  /**
   * Forget the current comm and say why (`reason`; null: nobody needs to
   * know). `close` sends comm_close to the kernel; it is false where the comm
   * is already gone (restart, dead kernel).
   */
  private _dropComm(close: boolean, reason: DropReason | null): void {
    const comm = this._comm;
    this._comm = null;
    if (comm) {
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
    // losing the kernel or a restart makes the window stale even with no comm open
    if (reason !== null && (comm || reason !== 'replaced')) {
      this._dropped.emit(reason);
    }
  }

  private _onCommClosed(comm: Comm): void {
    if (comm !== this._comm) {
      return;
    }
    this._comm = null;
    this._dropped.emit('closed');
    const status = this._kernel?.status;
    if (status === 'restarting' || status === 'autorestarting' || status === 'dead') {
      return;
    }
    if (this._state !== 'loading') {
      this._setState('not-loaded');
    }
  }

  // ---- small helpers --------------------------------------------------------

  /** Read afresh: the state can change while `loadExtension` awaits. */
  private _stillLoading(): boolean {
    return this._state === 'loading';
  }

  private _setState(state: ConnectionState): void {
    if (this._state !== state) {
      this._state = state;
      this._changed.emit();
    }
  }

  private _tell(message: string, kind: StatusKind): void {
    this._news.emit({ message, kind });
  }

  private _sessionContext: ISessionContext;
  private _kernel: Kernel.IKernelConnection | null = null;
  private _comm: Comm | null = null;
  private _state: ConnectionState = 'no-kernel';
  private _language: string | null = null;
  private _languageOk = false;
  private _wanted = false;
  private _busy = false;
  private _busyTimer: ReturnType<typeof setTimeout> | null = null;
  private _busyDelayMs: number;
  private _generation = 0;
  private _isDisposed = false;
  private _changed = new Signal<this, void>(this);
  private _dataReceived = new Signal<this, unknown>(this);
  private _kernelOpened = new Signal<this, unknown>(this);
  private _dropped = new Signal<this, DropReason>(this);
  private _news = new Signal<this, IStatusLine>(this);
}

export function describeError(error: unknown): string {
  if (error instanceof Error) {
    return oneLine(error.message) || error.name;
  }
  return oneLine(String(error));
}
