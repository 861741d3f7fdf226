/**
 * Just enough of a JupyterLab kernel, session context and comm to drive
 * DeviceConnection and DevicePanel in jsdom. Each fake records what the
 * sidebar sent so tests can check the requests on the wire.
 */
import * as fs from 'fs';
import * as path from 'path';

import type { ISessionContext } from '@jupyterlab/apputils';
import { Signal } from '@lumino/signaling';

import { DeviceConnection } from '../connection';
import { DevicePanel } from '../panel';
import type { IViewMessage } from '../protocol';

export const FIXTURE_DIR = path.resolve(__dirname, '..', '..', '..', 'tests', 'fixtures');

export function fixtureNames(): string[] {
  return fs
    .readdirSync(FIXTURE_DIR)
    .filter(name => name.startsWith('view_') && name.endsWith('.json'))
    .sort();
}

export function loadFixture(name: string): IViewMessage {
  const file = name.endsWith('.json') ? name : `view_${name}.json`;
  return JSON.parse(fs.readFileSync(path.join(FIXTURE_DIR, file), 'utf-8')) as IViewMessage;
}

/** A fixture view with some fields changed (a fresh copy each time). */
export function withView(
  name: string,
  change: (view: IViewMessage) => void = () => undefined
): IViewMessage {
  const view = loadFixture(name);
  change(view);
  return view;
}

const done = { done: Promise.resolve({}) };

export class FakeComm {
  constructor(
    readonly targetName: string,
    readonly commId: string
  ) {}

  onMsg: (msg: unknown) => void = () => undefined;
  onClose: (msg: unknown) => void = () => undefined;
  opened: unknown[] = [];
  sent: Record<string, unknown>[] = [];
  closedByFrontend = false;
  isDisposed = false;

  open(data: unknown): typeof done {
    this.opened.push(JSON.parse(JSON.stringify(data)));
    return done;
  }

  send(data: Record<string, unknown>): typeof done {
    if (this.isDisposed) {
      throw new Error('Cannot send');
    }
    this.sent.push(JSON.parse(JSON.stringify(data)));
    return done;
  }

  close(): typeof done {
    if (!this.isDisposed) {
      this.closedByFrontend = true;
      this.isDisposed = true;
      this.onClose({ content: { comm_id: this.commId, data: {} } });
    }
    return done;
  }

  /** The kernel sends `data` on this comm. */
  receive(data: unknown): void {
    this.onMsg({ content: { comm_id: this.commId, data: JSON.parse(JSON.stringify(data)) } });
  }

  /** The kernel closes the comm (what ipykernel does for an unknown target). */
  kernelCloses(): void {
    this.isDisposed = true;
    this.onClose({ content: { comm_id: this.commId, data: {} } });
  }

  /** Every request the sidebar put on this comm, the opening one first. */
  get requests(): Record<string, unknown>[] {
    return [...(this.opened as Record<string, unknown>[]), ...this.sent];
  }
}

type CommCallback = (comm: FakeComm, msg: unknown) => void;

export interface IExecuteReply {
  status: 'ok' | 'error' | 'aborted';
  ename?: string;
  evalue?: string;
  traceback?: string[];
}

export class FakeKernel {
  constructor(readonly language: string = 'python') {
    this.spec = Promise.resolve({ name: 'python3', display_name: 'Python 3', language });
    this.info = Promise.resolve({ language_info: { name: language } });
  }

  status = 'idle';
  isDisposed = false;
  spec: Promise<unknown>;
  info: Promise<unknown>;
  targets = new Map<string, CommCallback>();
  comms: FakeComm[] = [];
  executed: Record<string, unknown>[] = [];
  executeReply: IExecuteReply = { status: 'ok' };
  private _count = 0;

  registerCommTarget(name: string, callback: CommCallback): void {
    this.targets.set(name, callback);
  }

  removeCommTarget(name: string, callback: CommCallback): void {
    if (this.targets.get(name) === callback) {
      this.targets.delete(name);
    }
  }

  createComm(targetName: string): FakeComm {
    const comm = new FakeComm(targetName, `frontend-${++this._count}`);
    this.comms.push(comm);
    return comm;
  }

  /** Runs when code is executed, before the reply (e.g. the kernel opens a comm). */
  onExecute: (() => void) | null = null;

  requestExecute(content: Record<string, unknown>): { done: Promise<unknown> } {
    this.executed.push(content);
    this.onExecute?.();
    return { done: Promise.resolve({ content: this.executeReply }) };
  }

  /** The kernel opens a comm to the frontend (as `%load_ext` does). */
  openCommFromKernel(data: unknown = {}): FakeComm {
    const comm = new FakeComm('torchdevice_magic', `kernel-${++this._count}`);
    this.comms.push(comm);
    const target = this.targets.get('torchdevice_magic');
    if (!target) {
      throw new Error('no comm target registered');
    }
    target(comm, { content: { comm_id: comm.commId, target_name: comm.targetName, data } });
    return comm;
  }

  /** The comm the sidebar is using now (the last one not closed). */
  get liveComm(): FakeComm | undefined {
    return [...this.comms].reverse().find(c => !c.isDisposed);
  }
}

export class FakeSessionContext {
  constructor(kernel: FakeKernel | null) {
    this.session = kernel ? { kernel } : null;
  }

  session: { kernel: FakeKernel | null } | null;
  kernelChanged = new Signal<this, { name: 'kernel'; oldValue: unknown; newValue: unknown }>(this);
  statusChanged = new Signal<this, string>(this);
  disposed = new Signal<this, void>(this);

  get kernel(): FakeKernel | null {
    return this.session?.kernel ?? null;
  }

  setStatus(status: string): void {
    if (this.kernel) {
      this.kernel.status = status;
    }
    this.statusChanged.emit(status);
  }

  changeKernel(kernel: FakeKernel | null): void {
    const oldValue = this.kernel;
    this.session = kernel ? { kernel } : null;
    this.kernelChanged.emit({ name: 'kernel', oldValue, newValue: kernel });
  }
}

/** Let pending promise callbacks (language check, execute replies) run. */
export async function flush(): Promise<void> {
  for (let i = 0; i < 5; i++) {
    await new Promise(resolve => setTimeout(resolve, 0));
  }
}

export interface IHarness {
  kernel: FakeKernel;
  session: FakeSessionContext;
  connection: DeviceConnection;
  panel: DevicePanel;
  comm: FakeComm;
}

/**
 * A panel showing a connection whose probe comm is open; when `snapshot` is
 * given the kernel has answered with it.
 */
export async function connectedPanel(snapshot?: IViewMessage): Promise<IHarness> {
  const kernel = new FakeKernel();
  const session = new FakeSessionContext(kernel);
  const connection = new DeviceConnection(session as unknown as ISessionContext, {
    busyDelayMs: 0
  });
  const panel = new DevicePanel();
  document.body.appendChild(panel.node);
  connection.activate();
  await flush();
  panel.setConnection(connection, 'Untitled.ipynb');
  const comm = kernel.liveComm!;
  if (snapshot) {
    comm.receive(snapshot);
  }
  return { kernel, session, connection, panel, comm };
}

export function q<T extends Element = HTMLElement>(root: ParentNode, selector: string): T {
  const found = root.querySelector<T>(selector);
  if (!found) {
    throw new Error(`nothing matches ${selector}`);
  }
  return found;
}

export function rowNames(panel: DevicePanel): string[] {
  return Array.from(panel.node.querySelectorAll<HTMLElement>('tbody tr.jp-TorchDevices-row')).map(
    tr => tr.dataset.name!
  );
}
