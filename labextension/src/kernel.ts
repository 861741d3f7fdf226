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
import { Signal } from '@lumino/signaling';

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
    this._busy = new BusyFlag(
      options.busyDelayMs ?? 300,
      () => this._kernel?.status === 'busy',
      () => this.changed.emit()
    );
    this._slot = new CommSlot(
      data => {
        if (!this._isDisposed) {
          this.dataReceived.emit(data);
        }
      },
      () => this._onCommClosed()
    );
    sessionContext.kernelChanged.connect(this._onKernelChanged, this);
    sessionContext.statusChanged.connect(this._onStatusChanged, this);
    this._attach(sessionContext.session?.kernel ?? null);
  }

  /** The state, the busy flag or the language changed. */
  readonly changed = new Signal<this, void>(this);
  /** Data arrived on the current comm (unchecked: connection.ts checks it). */
  readonly dataReceived = new Signal<this, unknown>(this);
  /** The kernel opened a comm to us; its opening data (unchecked). */
  readonly kernelOpened = new Signal<this, unknown>(this);
  /** The comm went away (see DropReason); requests in flight on it are lost. */
  readonly dropped = new Signal<this, DropReason>(this);
  /** A line for the status line: loading, or something that went wrong. */
  readonly news = new Signal<this, IStatusLine>(this);

  /** Every state but 'ready', which the connection sets when a window arrives. */
  get state(): ConnectionState {
    return this._state;
  }

  get busy(): boolean {
    return this._busy.value;
  }

  get language(): string | null {
    return this._language;
  }

  /** A comm is open, so data can be sent. */
  get connected(): boolean {
    return this._slot.comm !== null;
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
    try {
      return this._slot.send(data);
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
    let why: string | null;
    try {
      why = await runLoad(kernel);
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
    if (why !== null) {
      if (this._stillLoading()) {
        this._setState('not-loaded');
      }
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
      this._busy.schedule();
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
    this._busy.set(false);
  }

  private async _checkLanguage(
    kernel: Kernel.IKernelConnection,
    generation: number
  ): Promise<void> {
    const language = await kernelLanguage(kernel);
    if (generation !== this._generation || this._isDisposed) {
      return;
    }
    this._language = language;
    // An unknown language is given the benefit of the doubt: the probe is
    // harmless, and a kernel without the target just closes the comm.
    if (language !== null && !isPythonLanguage(language) && !this._slot.comm) {
      this._setState('not-python');
      return;
    }
    this._languageOk = true;
    this._maybeProbe();
    this.changed.emit();
  }

  private _onStatusChanged(_sender: ISessionContext, status: Kernel.Status): void {
    if (!this._kernel || this._isDisposed) {
      return;
    }
    switch (status) {
      case 'busy':
        this._busy.schedule();
        break;
      case 'idle':
        this._busy.set(false);
        if (this._state === 'restarting' || this._state === 'dead') {
          this._setState('starting');
        }
        this._maybeProbe();
        break;
      case 'restarting':
      case 'autorestarting':
      case 'dead': {
        // JupyterLab disposes every comm on restart without calling onClose.
        const state = status === 'dead' ? 'dead' : 'restarting';
        this._dropComm(false, state);
        this._busy.set(false);
        this._setState(state);
        break;
      }
      default:
        break;
    }
  }

  // ---- the comm -------------------------------------------------------------

  private _maybeProbe(): void {
    const kernel = this._kernel;
    if (!kernel || !this._wanted || !this._languageOk || this._slot.comm || this._isDisposed) {
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
    const failed = this._slot.probe(kernel);
    if (failed === null) {
      this._setState('connecting');
      return;
    }
    if (failed.opened) {
      this._setState('not-loaded');
    }
    this._tell(`Could not open a comm to the kernel: ${describeError(failed.error)}`, 'error');
  }

  /** The kernel opened a comm to us (it ran `%load_ext torchdevice_magic`). */
  private _onCommOpened = (comm: Comm, msg: KernelMessage.ICommOpenMsg): void => {
    if (this._isDisposed) {
      comm.close();
      return;
    }
    this._languageOk = true;
    if (this._slot.use(comm)) {
      this.dropped.emit('replaced'); // the one it replaced is closed
    }
    this.kernelOpened.emit(msg.content.data);
  };

  /**
   * Forget the current comm and say why (`reason`; null: nobody needs to
   * know). `close` sends comm_close to the kernel; it is false where the comm
   * is already gone (restart, dead kernel).
   */
  private _dropComm(close: boolean, reason: DropReason | null): void {
    this._slot.drop(close);
    // losing the kernel or a restart makes the window stale even with no comm open
    if (reason !== null) {
      this.dropped.emit(reason);
    }
  }

  /** The kernel closed the comm (no such target, or it went away). */
  private _onCommClosed(): void {
    this.dropped.emit('closed');
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
      this.changed.emit();
    }
  }

  private _tell(message: string, kind: StatusKind): void {
    this.news.emit({ message, kind });
  }

  private _sessionContext: ISessionContext;
  private _kernel: Kernel.IKernelConnection | null = null;
  private _state: ConnectionState = 'no-kernel';
  private _language: string | null = null;
  private _languageOk = false;
  private _wanted = false;
  private _busy: BusyFlag;
  private _slot: CommSlot;
  private _generation = 0;
  private _isDisposed = false;
}

/** The one comm to the kernel: adopt it, forget it (closing it or not). */
class CommSlot {
  constructor(
    private readonly _onData: (data: unknown) => void,
    private readonly _onClosed: () => void
  ) {}

  get comm(): Comm | null {
    return this._comm;
  }

  /** Make `comm` the one channel; true when it replaced one (which is closed). */
  use(comm: Comm): boolean {
    if (this._comm === comm) {
      return false;
    }
    const replaced = this.drop(true);
    this._comm = comm;
    comm.onMsg = msg => {
      if (comm === this._comm) {
        this._onData(msg.content.data);
      }
    };
    comm.onClose = () => {
      if (comm === this._comm) {
        this._comm = null;
        this._onClosed();
      }
    };
    return replaced;
  }

  /**
   * Open a comm of our own and adopt it (opening is the request: the kernel
   * answers with its first window). Null when it went out, else the error and
   * whether it came from opening (a comm was made, then dropped) or making it.
   */
  probe(kernel: Kernel.IKernelConnection): { error: unknown; opened: boolean } | null {
    let comm: Comm;
    try {
      comm = kernel.createComm(COMM_TARGET);
    } catch (error) {
      return { error, opened: false };
    }
    this.use(comm);
    try {
      comm.open({});
    } catch (error) {
      this.drop(false);
      return { error, opened: true };
    }
    return null;
  }

  /** Put `data` on the comm; false when there is none (throws when it cannot go). */
  send(data: Record<string, unknown>): boolean {
    if (!this._comm) {
      return false;
    }
    this._comm.send({ ...data } as Parameters<Comm['send']>[0]);
    return true;
  }

  /** Forget the comm (`close`: tell the kernel); true when there was one. */
  drop(close: boolean): boolean {
    const comm = this._comm;
    if (!comm) {
      return false;
    }
    this._comm = null;
    comm.onMsg = () => undefined;
    comm.onClose = () => undefined;
    if (close && !comm.isDisposed) {
      try {
        comm.close();
      } catch {
        // the kernel is gone; nothing to tell it
      }
    }
    return true;
  }

  private _comm: Comm | null = null;
}

/** "Busy" once the kernel has stayed busy for `delayMs` (see IKernelChannelOptions). */
class BusyFlag {
  constructor(
    private readonly _delayMs: number,
    private readonly _stillBusy: () => boolean,
    private readonly _changed: () => void
  ) {}

  get value(): boolean {
    return this._busy;
  }

  /** The kernel said busy: raise the flag after the delay if it still is. */
  schedule(): void {
    if (this._busy || this._timer !== null) {
      return;
    }
    if (this._delayMs <= 0) {
      this.set(true);
      return;
    }
    this._timer = setTimeout(() => {
      this._timer = null;
      if (this._stillBusy()) {
        this.set(true);
      }
    }, this._delayMs);
  }

  set(busy: boolean): void {
    if (this._timer !== null) {
      clearTimeout(this._timer);
      this._timer = null;
    }
    if (this._busy !== busy) {
      this._busy = busy;
      this._changed();
    }
  }

  private _busy = false;
  private _timer: ReturnType<typeof setTimeout> | null = null;
}

/** The kernel's language from its kernelspec, else from its info; null when neither says. */
export async function kernelLanguage(kernel: Kernel.IKernelConnection): Promise<string | null> {
  try {
    const spec = await kernel.spec;
    if (spec?.language) {
      return spec.language;
    }
  } catch {
    // fall back to the kernel's own info below
  }
  try {
    const info = await kernel.info;
    return info.language_info?.name || null;
  } catch {
    return null;
  }
}

/**
 * Run LOAD_CODE silently, outside the history: null when it loaded, else why
 * not, in one line (a request that fails throws).
 */
async function runLoad(kernel: Kernel.IKernelConnection): Promise<string | null> {
  const future = kernel.requestExecute({ code: LOAD_CODE, silent: true, store_history: false });
  const content = (await future.done).content;
  if (content.status === 'ok') {
    return null;
  }
  return content.status === 'error'
    ? oneLine(`${content.ename}: ${content.evalue}`)
    : 'the kernel aborted the request';
}

export function describeError(error: unknown): string {
  if (error instanceof Error) {
    return oneLine(error.message) || error.name;
  }
  return oneLine(String(error));
}
