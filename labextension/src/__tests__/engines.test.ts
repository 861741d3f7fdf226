/**
 * The engines section: the kernel's `engines` message (every ipyparallel
 * engine's summary) drawn as one row per engine and device, the engines that
 * did not answer named, an engine's objects on expand; nothing is gathered
 * until the user asks.
 */
import type { IEnginesMessage } from '../protocol';
import { connectedPanel, IHarness, loadFixture, q } from './fakes';

function enginesMessage(change: Partial<IEnginesMessage> = {}): IEnginesMessage {
  return {
    protocol: 'torchdevice_magic',
    version: 4,
    type: 'engines',
    seq: 5,
    request_id: 'tdm-x-1',
    available: true,
    message:
      'engine 2 is not in the table: no answer within 2 s (busy: 1 of your requests not finished yet)',
    seconds: 0.0241,
    expanded: null,
    missing: [
      { engine: 2, reason: 'no answer within 2 s (busy: 1 of your requests not finished yet)' }
    ],
    engines: [
      {
        engine: 0,
        rank: 0,
        host: 'node-a',
        status: '',
        devices: [
          { device: 'cpu', objects: 1, bytes: 160, size: '160 B', memory: '' },
          {
            device: 'cuda:0',
            objects: 2,
            bytes: 1600,
            size: '1.6 KiB',
            memory: '2.0 MiB / 80.0 GiB'
          }
        ],
        objects: null
      },
      { engine: 1, rank: 1, host: 'node-b', status: '', devices: [], objects: null }
    ],
    ...change
  };
}

/** The kernel says whether it has an ipyparallel client (sent when that changes). */
function reachable(h: IHarness, available: boolean): void {
  h.comm.receive({
    protocol: 'torchdevice_magic',
    version: 4,
    type: 'engines_reachable',
    seq: 4,
    available
  });
}

function sectionHidden(h: IHarness): boolean {
  return q(h.panel.node, '.jp-TorchDevices-engines').hidden;
}

/** What shell/gather.py says when the kernel has no client (its CONNECT_HINT). */
const NO_CLIENT =
  'no ipyparallel client in this session: import ipyparallel as ipp; ' +
  'rc = ipp.Cluster(n=2).start_and_connect_sync() starts two engines and connects to them ' +
  '(rc = ipp.Client() connects to a cluster already running)';

function cells(h: IHarness): string[][] {
  return Array.from(h.panel.node.querySelectorAll('.jp-TorchDevices-engines tbody tr')).map(tr =>
    Array.from(tr.querySelectorAll('td')).map(td => td.textContent ?? '')
  );
}

function sentGathers(h: IHarness): unknown[] {
  return h.comm.sent.filter(m => m.type === 'gather_engines').map(m => m.expand);
}

describe('engines section', () => {
  it('shows only while the kernel has a client to gather from', async () => {
    const h = await connectedPanel(loadFixture('basic'));
    expect(sectionHidden(h)).toBe(true); // untold: no client
    reachable(h, true);
    expect(sectionHidden(h)).toBe(false);
    h.comm.receive(enginesMessage());
    expect(cells(h).length).toBe(3);
    // the client went away: the section goes, and a later client's engines start afresh
    reachable(h, false);
    expect(sectionHidden(h)).toBe(true);
    expect(h.connection.engines).toBeNull();
    reachable(h, true);
    expect(sectionHidden(h)).toBe(false);
    expect(cells(h)).toEqual([]);
    h.panel.dispose();
    h.connection.dispose();
  });

  it('asks for nothing until the user presses Gather', async () => {
    const h = await connectedPanel(loadFixture('basic'));
    reachable(h, true);
    expect(sentGathers(h)).toEqual([]);
    const gather = q<HTMLButtonElement>(h.panel.node, '.jp-TorchDevices-engines-gather');
    expect(gather.textContent).toBe('Gather');
    gather.click();
    expect(sentGathers(h)).toEqual([null]);
    // a refresh does not gather while no engines are shown
    h.connection.refresh();
    expect(sentGathers(h)).toEqual([null]);
    h.panel.dispose();
    h.connection.dispose();
  });

  it("draws one row per engine and device in the kernel's words, and names the silent ones", async () => {
    const h = await connectedPanel(loadFixture('basic'));
    reachable(h, true);
    h.comm.receive(enginesMessage());
    expect(cells(h)).toEqual([
      ['▸', '0', 'cpu', '160 B', '1', '', '0', 'node-a'],
      ['', '', 'cuda:0', '1.6 KiB', '2', '2.0 MiB / 80.0 GiB', '', ''],
      ['▸', '1', '-', '', '0', '', '1', 'node-b']
    ]);
    expect(q(h.panel.node, '.jp-TorchDevices-engines-note').textContent).toBe(
      '2 engines answered in 24 ms'
    );
    expect(q(h.panel.node, '.jp-TorchDevices-engines-missing').textContent).toBe(
      'engine 2: no answer within 2 s (busy: 1 of your requests not finished yet)'
    );
    // shown engines are refreshed with the rest
    h.connection.refresh();
    expect(sentGathers(h)).toEqual([null]);
    h.panel.dispose();
    h.connection.dispose();
  });

  it('expands an engine to its objects and collapses it again', async () => {
    const h = await connectedPanel(loadFixture('basic'));
    reachable(h, true);
    h.comm.receive(enginesMessage());
    const expand = h.panel.node.querySelectorAll<HTMLButtonElement>(
      '.jp-TorchDevices-engines-expand'
    );
    expand[1].click();
    expect(sentGathers(h)).toEqual([1]);
    const message = enginesMessage({ expanded: 1 });
    message.engines[1].objects = [
      { name: 'model', kind: 'module', type: 'Linear', device: 'cuda:1', bytes: 144, size: '144 B' }
    ];
    h.comm.receive(message);
    const objects = Array.from(
      h.panel.node.querySelectorAll('.jp-TorchDevices-engines-object td')
    ).map(td => td.textContent);
    expect(objects).toEqual(['', 'model', 'cuda:1', '144 B', 'Linear']);
    const collapse = h.panel.node.querySelectorAll<HTMLButtonElement>(
      '.jp-TorchDevices-engines-expand'
    )[1];
    expect(collapse.textContent).toBe('▾');
    collapse.click();
    expect(sentGathers(h)).toEqual([1, null]);
    h.panel.dispose();
    h.connection.dispose();
  });

  it('says why there are no engines when the kernel has no client', async () => {
    const h = await connectedPanel(loadFixture('basic'));
    reachable(h, true);
    h.comm.receive(
      enginesMessage({
        available: false,
        message: NO_CLIENT,
        engines: [],
        missing: []
      })
    );
    expect(q(h.panel.node, '.jp-TorchDevices-engines-note').textContent).toBe(NO_CLIENT);
    expect(cells(h)).toEqual([]);
    h.panel.dispose();
    h.connection.dispose();
  });

  it('refuses an engines message that does not match the schema', async () => {
    const h = await connectedPanel(loadFixture('basic'));
    const bad = enginesMessage() as unknown as Record<string, unknown>;
    bad.engines = [{ engine: 'zero' }];
    h.comm.receive(bad);
    expect(h.connection.engines).toBeNull();
    expect(cells(h)).toEqual([]);
    h.panel.dispose();
    h.connection.dispose();
  });
});
