/**
 * The comm lifecycle and the panel's states, against a fake kernel.
 */
import type { ISessionContext } from '@jupyterlab/apputils';

import { DeviceConnection } from '../connection';
import { isPythonLanguage, LOAD_CODE } from '../kernel';
import { BUSY_NOTICE, DevicePanel } from '../panel';
import {
  connectedPanel,
  FakeKernel,
  FakeSessionContext,
  flush,
  IHarness,
  loadFixture,
  q,
  rowNames,
  withView
} from './fakes';

const disposables: { dispose(): void }[] = [];

afterEach(() => {
  while (disposables.length) {
    disposables.pop()!.dispose();
  }
  document.body.innerHTML = '';
});

async function harness(snapshot = loadFixture('basic')): Promise<IHarness> {
  const h = await connectedPanel(snapshot);
  disposables.push(h.panel, h.connection);
  return h;
}

function setup(kernel: FakeKernel | null): {
  session: FakeSessionContext;
  connection: DeviceConnection;
  panel: DevicePanel;
} {
  const session = new FakeSessionContext(kernel);
  const connection = new DeviceConnection(session as unknown as ISessionContext, {
    busyDelayMs: 0
  });
  const panel = new DevicePanel();
  document.body.appendChild(panel.node);
  panel.setConnection(connection, 'nb.ipynb');
  disposables.push(panel, connection);
  return { session, connection, panel };
}

const notice = (panel: DevicePanel): string =>
  panel.node.querySelector('.jp-TorchDevices-noticeText')?.textContent ?? '';
const loadButton = (panel: DevicePanel): HTMLButtonElement =>
  q<HTMLButtonElement>(panel.node, 'button.jp-TorchDevices-load');

describe('states', () => {
  it('no notebook', () => {
    const panel = new DevicePanel();
    disposables.push(panel);
    panel.setConnection(null);
    expect(panel.node.dataset.state).toBe('no-notebook');
    expect(notice(panel)).toMatch(/Open a notebook/);
    expect(loadButton(panel).hidden).toBe(true);
  });

  it('no kernel', () => {
    const { panel } = setup(null);
    expect(panel.node.dataset.state).toBe('no-kernel');
    expect(notice(panel)).toMatch(/no kernel/);
  });

  it('a kernel that is not Python', async () => {
    const kernel = new FakeKernel('R');
    const { connection, panel } = setup(kernel);
    connection.activate();
    await flush();
    expect(panel.node.dataset.state).toBe('not-python');
    expect(notice(panel)).toContain('Devices works with Python kernels');
    expect(notice(panel)).toContain('R');
    expect(kernel.comms).toHaveLength(0); // never probed
  });

  it('recognises Python kernels', () => {
    expect(isPythonLanguage('python')).toBe(true);
    expect(isPythonLanguage('Python3')).toBe(true);
    expect(isPythonLanguage('ipython')).toBe(true);
    expect(isPythonLanguage('R')).toBe(false);
    expect(isPythonLanguage('julia')).toBe(false);
  });

  it('waits to be shown before opening a comm', async () => {
    const kernel = new FakeKernel();
    const { connection, panel } = setup(kernel);
    await flush();
    expect(kernel.comms).toHaveLength(0);
    expect(kernel.targets.has('torchdevice_magic')).toBe(true);
    connection.activate();
    expect(kernel.comms).toHaveLength(1);
    expect(kernel.comms[0].targetName).toBe('torchdevice_magic');
    expect(panel.node.dataset.state).toBe('connecting');
  });

  it('not loaded: the kernel closes the comm; Load runs %load_ext and reconnects', async () => {
    const kernel = new FakeKernel();
    const { connection, panel } = setup(kernel);
    connection.activate();
    await flush();
    kernel.comms[0].kernelCloses();
    expect(panel.node.dataset.state).toBe('not-loaded');
    expect(notice(panel)).toBe('torchdevice_magic is not loaded in this kernel.');
    const load = loadButton(panel);
    expect(load.hidden).toBe(false);
    expect(load.textContent).toBe('Load in this kernel');

    load.click();
    expect(panel.node.dataset.state).toBe('loading');
    expect(load.disabled).toBe(true);
    expect(kernel.executed).toEqual([{ code: LOAD_CODE, silent: true, store_history: false }]);
    await flush();
    // No kernel-opened comm arrived: the sidebar opened a new one.
    expect(kernel.comms).toHaveLength(2);
    const comm = kernel.liveComm!;
    expect(comm.opened[0]).toEqual({}); // opening is the request
    comm.receive(loadFixture('basic'));
    expect(panel.node.dataset.state).toBe('ready');
    expect(load.hidden).toBe(true);
  });

  it('Load: the comm the kernel opens while loading is used, no second probe', async () => {
    const kernel = new FakeKernel();
    const { connection, panel } = setup(kernel);
    connection.activate();
    await flush();
    kernel.comms[0].kernelCloses();
    // What comm.py does on load: open a comm carrying a snapshot.
    kernel.onExecute = () => kernel.openCommFromKernel(loadFixture('basic'));
    loadButton(panel).click();
    expect(panel.node.dataset.state).toBe('ready');
    await flush();
    expect(panel.node.dataset.state).toBe('ready');
    expect(kernel.comms).toHaveLength(2); // the probe and the kernel's; nothing more
    const status = q(panel.node, '.jp-TorchDevices-status');
    expect(status.textContent).toBe('torchdevice_magic is loaded in this kernel');
    expect(status.classList.contains('jp-mod-error')).toBe(false);
  });

  it('Load that fails says why, in one line', async () => {
    const kernel = new FakeKernel();
    kernel.executeReply = {
      status: 'error',
      ename: 'ModuleNotFoundError',
      evalue: "No module named 'torchdevice_magic'",
      traceback: ['Traceback (most recent call last):', '...']
    };
    const { connection, panel } = setup(kernel);
    connection.activate();
    await flush();
    kernel.comms[0].kernelCloses();
    loadButton(panel).click();
    await flush();
    expect(panel.node.dataset.state).toBe('not-loaded');
    const status = q(panel.node, '.jp-TorchDevices-status');
    expect(status.textContent).toBe(
      "Could not load torchdevice_magic: ModuleNotFoundError: No module named 'torchdevice_magic'"
    );
    expect(status.classList.contains('jp-mod-error')).toBe(true);
  });

  it('adopts the comm the kernel opens on %load_ext', async () => {
    const kernel = new FakeKernel();
    const { connection, panel } = setup(kernel);
    connection.activate();
    await flush();
    kernel.comms[0].kernelCloses();
    expect(panel.node.dataset.state).toBe('not-loaded');

    const comm = kernel.openCommFromKernel({});
    // It asks for a snapshot on the new comm.
    expect(comm.sent[0]).toMatchObject({ type: 'refresh', version: 4 });
    comm.receive(loadFixture('basic'));
    expect(panel.node.dataset.state).toBe('ready');
    expect(rowNames(panel)).toHaveLength(loadFixture('basic').window.rows.length);
  });

  it('a kernel-opened comm carrying a snapshot replaces the old comm', async () => {
    const h = await harness();
    const snapshot = loadFixture('mixed');
    const comm = h.kernel.openCommFromKernel(snapshot);
    expect(h.comm.closedByFrontend).toBe(true);
    expect(comm.sent).toHaveLength(0);
    expect(rowNames(h.panel).sort()).toEqual(snapshot.window.rows.map(r => r.name).sort());
    // Only the new comm is used from now on.
    q<HTMLButtonElement>(h.panel.node, 'button.jp-TorchDevices-refresh').click();
    expect(comm.sent).toHaveLength(1);
  });

  it('torch not imported', async () => {
    const h = await harness(loadFixture('empty'));
    expect(h.panel.node.dataset.state).toBe('ready');
    expect(h.panel.node.dataset.torch).toBe('false');
    expect(notice(h.panel)).toBe('torch is not imported in this kernel yet.');
  });

  it('busy: keeps the last snapshot, says so, and holds moves', async () => {
    const snapshot = withView('basic', v => {
      v.header.buttons.undo = { enabled: true, label: 'Undo', reason: 'Undo: Moved 1 object' };
    });
    const h = await harness(snapshot);
    h.session.setStatus('busy');
    const busy = q(h.panel.node, '.jp-TorchDevices-busy');
    expect(busy.hidden).toBe(false);
    expect(busy.textContent).toBe(BUSY_NOTICE);
    expect(h.panel.node.dataset.busy).toBe('true');
    expect(rowNames(h.panel)).toHaveLength(snapshot.window.rows.length);
    expect(q<HTMLButtonElement>(h.panel.node, 'button.jp-TorchDevices-moveAll').disabled).toBe(
      true
    );
    expect(q<HTMLButtonElement>(h.panel.node, 'button.jp-TorchDevices-undo').disabled).toBe(true);
    h.session.setStatus('idle');
    expect(busy.hidden).toBe(true);
    expect(q<HTMLButtonElement>(h.panel.node, 'button.jp-TorchDevices-moveAll').disabled).toBe(
      false
    );
  });

  it('busy notices wait for the kernel to stay busy', async () => {
    const kernel = new FakeKernel();
    const session = new FakeSessionContext(kernel);
    const connection = new DeviceConnection(session as unknown as ISessionContext, {
      busyDelayMs: 20
    });
    disposables.push(connection);
    session.setStatus('busy');
    expect(connection.busy).toBe(false);
    session.setStatus('idle');
    await new Promise(resolve => setTimeout(resolve, 40));
    expect(connection.busy).toBe(false);
    session.setStatus('busy');
    await new Promise(resolve => setTimeout(resolve, 40));
    expect(connection.busy).toBe(true);
  });

  it('restart: forgets the snapshot, then probes again when idle', async () => {
    const h = await harness();
    h.session.setStatus('restarting');
    expect(h.panel.node.dataset.state).toBe('restarting');
    expect(notice(h.panel)).toMatch(/restarting/);
    expect(rowNames(h.panel)).toHaveLength(0);
    // JupyterLab disposes comms on restart without onClose.
    h.comm.isDisposed = true;
    h.session.setStatus('starting');
    expect(h.kernel.comms).toHaveLength(1);
    h.session.setStatus('idle');
    expect(h.kernel.comms).toHaveLength(2);
    const probe = h.kernel.liveComm!;
    probe.kernelCloses(); // a fresh kernel has not loaded the extension
    expect(h.panel.node.dataset.state).toBe('not-loaded');
  });

  it('dead kernel', async () => {
    const h = await harness();
    h.session.setStatus('dead');
    expect(h.panel.node.dataset.state).toBe('dead');
    expect(notice(h.panel)).toMatch(/dead/);
    expect(q<HTMLButtonElement>(h.panel.node, 'button.jp-TorchDevices-refresh').disabled).toBe(
      true
    );
  });

  it('kernel change: leaves the old kernel, connects to the new one', async () => {
    const h = await harness();
    const next = new FakeKernel();
    h.session.changeKernel(next);
    expect(h.comm.closedByFrontend).toBe(true);
    expect(h.kernel.targets.has('torchdevice_magic')).toBe(false);
    expect(next.targets.has('torchdevice_magic')).toBe(true);
    await flush();
    expect(next.comms).toHaveLength(1);
    next.comms[0].receive(loadFixture('mixed'));
    expect(h.panel.node.dataset.state).toBe('ready');
    expect(rowNames(h.panel).sort()).toEqual(
      loadFixture('mixed')
        .window.rows.map(r => r.name)
        .sort()
    );
    h.session.changeKernel(null);
    expect(h.panel.node.dataset.state).toBe('no-kernel');
  });

  it('dispose closes the comm and unregisters the target', async () => {
    const h = await harness();
    h.connection.dispose();
    expect(h.comm.closedByFrontend).toBe(true);
    expect(h.kernel.targets.size).toBe(0);
  });

  it('the panel follows a connection switch', async () => {
    const a = await harness(loadFixture('basic'));
    const b = await harness(loadFixture('mixed'));
    a.panel.setConnection(b.connection, 'b.ipynb');
    expect(rowNames(a.panel).sort()).toEqual(
      loadFixture('mixed')
        .window.rows.map(r => r.name)
        .sort()
    );
    expect(q(a.panel.node, '.jp-TorchDevices-context').textContent).toBe('b.ipynb');
    a.panel.setConnection(null);
    expect(a.panel.node.dataset.state).toBe('no-notebook');
  });

  it('unload: one clear state, no stale status line', async () => {
    const h = await harness();
    h.comm.receive({
      protocol: 'torchdevice_magic',
      version: 4,
      type: 'reply',
      seq: 2,
      request_id: 'x',
      ok: true,
      message: 'Moved 1 object (4 B) to meta in 1 ms',
      outcome: null
    });
    h.comm.receive({
      protocol: 'torchdevice_magic',
      version: 4,
      type: 'unloaded',
      seq: 3,
      message: 'torchdevice_magic was unloaded from this kernel'
    });
    expect(h.panel.node.dataset.state).toBe('not-loaded');
    expect(notice(h.panel)).toBe('torchdevice_magic is not loaded in this kernel.');
    expect(q(h.panel.node, '.jp-TorchDevices-status').textContent).toBe('');
    expect(rowNames(h.panel)).toEqual([]);
    expect(loadButton(h.panel).hidden).toBe(false);
  });

  it("after a refresh the last move's status reads as earlier news, muted", async () => {
    const h = await harness();
    const status = (): HTMLElement => q(h.panel.node, '.jp-TorchDevices-status');
    const moveId = h.connection.move('meta', ['x']);
    h.comm.receive({
      protocol: 'torchdevice_magic',
      version: 4,
      type: 'reply',
      seq: 2,
      request_id: moveId,
      ok: true,
      message: 'Moved 1 object (4 B) to meta in 1 ms',
      outcome: null
    });
    expect(status().classList.contains('jp-mod-ok')).toBe(true);
    const id = h.connection.refresh();
    h.comm.receive({
      protocol: 'torchdevice_magic',
      version: 4,
      type: 'reply',
      seq: 3,
      request_id: id,
      ok: true,
      message: 'refreshed',
      outcome: null
    });
    expect(status().textContent).toBe(
      'last action, before the refresh: Moved 1 object (4 B) to meta in 1 ms'
    );
    expect(status().classList.contains('jp-mod-ok')).toBe(false);
    h.connection.refresh();
    h.comm.receive({
      protocol: 'torchdevice_magic',
      version: 4,
      type: 'reply',
      seq: 4,
      request_id: 'y',
      ok: true,
      message: 'window',
      outcome: null
    });
    expect(status().textContent).toBe(
      'last action, before the refresh: Moved 1 object (4 B) to meta in 1 ms'
    );
  });

  it('restart clears the status line', async () => {
    const h = await harness();
    h.comm.receive({
      protocol: 'torchdevice_magic',
      version: 4,
      type: 'reply',
      seq: 2,
      request_id: 'x',
      ok: true,
      message: 'Moved 1 object',
      outcome: null
    });
    h.session.setStatus('restarting');
    expect(q(h.panel.node, '.jp-TorchDevices-status').textContent).toBe('');
    expect(notice(h.panel)).toBe('The kernel is restarting…');
  });
});

describe('extension points for other message types', () => {
  it('every checked message is announced; send() puts a request on the comm', async () => {
    const h = await harness();
    const seen: string[] = [];
    h.connection.messageReceived.connect((_, message) => {
      seen.push(message.type);
    });
    h.comm.receive({
      protocol: 'torchdevice_magic',
      version: 4,
      type: 'unloaded',
      seq: 9,
      message: 'gone'
    });
    expect(seen).toEqual(['unloaded']);
    const h2 = await harness();
    const id = h2.connection.send('refresh', {});
    expect(id).not.toBeNull();
    expect(h2.comm.sent[h2.comm.sent.length - 1]).toMatchObject({
      type: 'refresh',
      request_id: id,
      version: 4
    });
  });
});

describe('sequence', () => {
  it('a delta carrying a move made elsewhere (the fix button) names it in the status line', async () => {
    const h = await harness();
    const seq = loadFixture('basic').seq;
    const status = (): string => q(h.panel.node, '.jp-TorchDevices-status').textContent ?? '';
    const window = { upsert: [], remove: [], splices: [], matching: 7, total: 7 };
    const moved = {
      action: 'move',
      ok: true,
      message: 'Moved 1 object (12 B) to simdev:0 in 0 ms',
      skipped: [],
      time: 1.5
    };
    h.comm.receive({
      protocol: 'torchdevice_magic',
      version: 4,
      type: 'delta',
      seq: seq + 1,
      base: seq,
      header: null,
      window,
      last_action: moved
    });
    expect(status()).toBe('Moved 1 object (12 B) to simdev:0 in 0 ms');
    // the re-run cell's delta has no news: the line keeps naming the move
    h.comm.receive({
      protocol: 'torchdevice_magic',
      version: 4,
      type: 'delta',
      seq: seq + 2,
      base: seq + 1,
      header: null,
      window,
      last_action: null
    });
    expect(status()).toBe('Moved 1 object (12 B) to simdev:0 in 0 ms');
  });

  it('a delta after another kernel message (a rerun) still applies', async () => {
    const h = await harness();
    const seq = loadFixture('basic').seq;
    h.comm.receive({
      protocol: 'torchdevice_magic',
      version: 4,
      type: 'rerun',
      seq: seq + 1,
      cell_id: 'c-1'
    });
    const sentBefore = h.comm.sent.length;
    h.comm.receive({
      protocol: 'torchdevice_magic',
      version: 4,
      type: 'delta',
      seq: seq + 2,
      base: seq + 1,
      header: null,
      window: {
        upsert: [],
        remove: ['y'],
        splices: [
          {
            at: loadFixture('basic').window.rows.findIndex(r => r.key === 'y'),
            remove: 1,
            insert: []
          }
        ],
        matching: 6,
        total: 6
      }
    });
    expect(rowNames(h.panel)).not.toContain('y');
    expect(h.comm.sent.length).toBe(sentBefore); // no window re-request
  });
});
