/**
 * The panel draws the kernel's view model and decides nothing: rows, sizes,
 * bars, the totals note and every button's state and reason come from the
 * view; sorting, searching, paging and the target are requests to the kernel.
 */
import { Signal } from '@lumino/signaling';

import { DEFAULT_SPEC } from '../requests';
import { DevicePanel, FILTER_DELAY_MS } from '../panel';
import type { IDeltaMessage, IRow, IViewMessage, IWindowSpec } from '../protocol';
import type { ConnectionState, IDeviceSource, IStatusLine } from '../tokens';
import { fromView, IMirror } from '../window';
import {
  connectedPanel,
  fixtureNames,
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
  jest.useRealTimers();
});

async function harness(view: IViewMessage = loadFixture('basic')): Promise<IHarness> {
  const h = await connectedPanel(view);
  disposables.push(h.panel, h.connection);
  return h;
}

const text = (panel: DevicePanel, selector: string): string =>
  q(panel.node, selector).textContent ?? '';

function cell(panel: DevicePanel, name: string, column: string): HTMLElement {
  return q(panel.node, `tr[data-name="${name}"] .jp-TorchDevices-cell-${column}`);
}

function lastRequest(h: IHarness): Record<string, unknown> {
  return h.comm.sent[h.comm.sent.length - 1];
}

function delta(
  base: number,
  fields: Partial<IDeltaMessage['window']>,
  header: IDeltaMessage['header'] = null
): IDeltaMessage {
  return {
    protocol: 'torchdevice_magic',
    version: 4,
    type: 'delta',
    seq: base + 1,
    base,
    header,
    window: { upsert: [], remove: [], splices: [], matching: 7, total: 7, ...fields },
    last_action: null,
    timeline: null
  };
}

describe.each(fixtureNames())('%s', name => {
  it('draws the view as the kernel computed it', async () => {
    const view = loadFixture(name);
    const h = await harness(view);
    if (!view.header.torch_imported) {
      expect(rowNames(h.panel)).toEqual([]);
      return;
    }
    // rows in the kernel's order, with the kernel's text
    expect(rowNames(h.panel)).toEqual(view.window.rows.map(r => r.name));
    for (const row of view.window.rows) {
      expect(cell(h.panel, row.name, 'size').textContent).toBe(row.size);
      expect(cell(h.panel, row.name, 'grad').textContent).toBe(row.grad);
      expect(cell(h.panel, row.name, 'shape').textContent).toBe(row.shape || '—');
      // a row whose data spans devices is marked where the kernel says so, and only there
      const tr = q(h.panel.node, `tr[data-name="${row.name}"]`);
      expect(tr.classList.contains('jp-mod-mixed')).toBe(row.mixed === true);
      // a row only the output history holds is dimmed where the kernel says so, and only there
      expect(tr.classList.contains('jp-mod-hidden')).toBe(row.hidden === true);
    }
    if (name === 'mixed') {
      expect(view.window.rows.filter(r => r.mixed).map(r => r.name)).toEqual(['model']);
    }
    if (name === 'basic') {
      expect(view.window.rows.filter(r => r.hidden).map(r => r.name)).toEqual(['Out[2]']);
    }
    const bars = Array.from(h.panel.node.querySelectorAll('.jp-TorchDevices-total'));
    expect(bars.map(b => b.querySelector('.jp-TorchDevices-totalSize')!.textContent)).toEqual(
      view.header.bars.map(b => b.text)
    );
    expect(text(h.panel, '.jp-TorchDevices-totalsNote')).toBe(view.header.totals_note);
    const notes = Array.from(h.panel.node.querySelectorAll('.jp-TorchDevices-deviceNote'));
    expect(notes.map(n => n.textContent)).toEqual(view.header.device_notes);
    const moveAll = q<HTMLButtonElement>(h.panel.node, 'button.jp-TorchDevices-moveAll');
    expect(moveAll.textContent).toBe(view.header.buttons.move_all.label);
    expect(moveAll.disabled).toBe(!view.header.buttons.move_all.enabled);
    expect(moveAll.title).toBe(view.header.buttons.move_all.reason);
    const undo = q<HTMLButtonElement>(h.panel.node, 'button.jp-TorchDevices-undo');
    expect(undo.disabled).toBe(!view.header.buttons.undo.enabled);
    expect(undo.title).toBe(view.header.buttons.undo.reason);
  });
});

describe('rows', () => {
  it('a row button exists only where the kernel says it can move, else the reason', async () => {
    const h = await harness();
    const hidden = q(h.panel.node, 'tr[data-name="Out[2]"] .jp-TorchDevices-cell-action');
    expect(hidden.querySelector('button')).toBeNull();
    expect(hidden.title).toBe("Out[2] is held only by IPython's output history");
    const part = q<HTMLButtonElement>(h.panel.node, 'tr[data-name="batch[0]"] button');
    expect(part.title).toBe('Move batch (all of it, not just batch[0]) to meta');
    part.click();
    expect(lastRequest(h)).toMatchObject({ type: 'move', device: 'meta', names: ['batch'] });
  });

  it('Move all is disabled with the reason the kernel gives', async () => {
    const view = withView('basic', v => {
      v.header.buttons.move_all = {
        enabled: false,
        label: 'Move all to meta',
        reason: 'nothing to move: everything movable is already on meta'
      };
    });
    const h = await harness(view);
    const moveAll = q<HTMLButtonElement>(h.panel.node, 'button.jp-TorchDevices-moveAll');
    expect(moveAll.disabled).toBe(true);
    expect(moveAll.title).toBe('nothing to move: everything movable is already on meta');
  });

  it('a delta updates only what changed; untouched rows keep their elements', async () => {
    const h = await harness();
    const keptRow = q(h.panel.node, 'tr[data-name="model"]');
    const x = loadFixture('basic').window.rows[0];
    const moved: IRow = { ...x, device: 'meta', size: '0 B (meta; needs 32.0 KiB)' };
    const seq = loadFixture('basic').seq;
    h.comm.receive(delta(seq, { upsert: [moved] }));
    expect(cell(h.panel, 'x', 'device').textContent).toBe('meta');
    expect(q(h.panel.node, 'tr[data-name="model"]')).toBe(keptRow);
    h.comm.receive(
      delta(seq + 1, {
        remove: ['y'],
        splices: [{ at: rowNames(h.panel).indexOf('y'), remove: 1, insert: [] }]
      })
    );
    expect(rowNames(h.panel)).not.toContain('y');
  });

  it("a delta's header brings only the fields that changed; the others stay", async () => {
    const h = await harness();
    const basic = loadFixture('basic');
    const moveAll = q<HTMLButtonElement>(h.panel.node, 'button.jp-TorchDevices-moveAll');
    const reason = moveAll.title;
    const bar = { device: 'cpu', bytes: 2048, text: '2.0 KiB', fraction: 1 };
    const changes = { bars: [bar] } as unknown as IDeltaMessage['header'];
    h.comm.receive(delta(basic.seq, {}, changes));
    const sizes = [...h.panel.node.querySelectorAll('.jp-TorchDevices-totalSize')];
    expect(sizes.map(node => node.textContent)).toEqual(['2.0 KiB']);
    expect(moveAll.title).toBe(reason); // the buttons came with the view, not again
    expect(text(h.panel, '.jp-TorchDevices-totalsNote')).toBe(basic.header.totals_note);
  });

  it('row buttons kept through a move come back once its reply has come', async () => {
    const h = await harness();
    const basic = loadFixture('basic');
    const model = basic.window.rows.find(r => r.name === 'model')!;
    expect(model.action.enabled).toBe(true);
    q<HTMLButtonElement>(h.panel.node, 'button.jp-TorchDevices-moveAll').click();
    const request = lastRequest(h);
    const modelButton = (): HTMLButtonElement =>
      q<HTMLButtonElement>(h.panel.node, 'tr[data-name="model"] button.jp-TorchDevices-rowMove');
    expect(modelButton().disabled).toBe(true); // waiting for the kernel
    // the move's view comes before its reply and does not touch model's row
    const x = basic.window.rows[0];
    h.comm.receive(delta(basic.seq, { upsert: [{ ...x, device: 'meta' }] }));
    h.comm.receive({
      protocol: 'torchdevice_magic',
      version: 4,
      type: 'reply',
      seq: basic.seq + 2,
      request_id: request.request_id,
      ok: true,
      message: 'Moved 1 object (32.0 KiB) to meta in 1 ms'
    });
    expect(modelButton().disabled).toBe(false);
    expect(modelButton().title).toBe(model.action.reason);
  });

  it('a delta out of step makes the sidebar ask for the whole window', async () => {
    const h = await harness();
    h.comm.receive(delta(9, {}));
    expect(lastRequest(h)).toMatchObject({ type: 'window', spec: { sort: 'size', offset: 0 } });
  });
});

describe('requests: the kernel sorts, searches and pages', () => {
  it('the search box asks for a filtered window once typing pauses', async () => {
    const h = await harness();
    jest.useFakeTimers();
    const input = q<HTMLInputElement>(h.panel.node, 'input.jp-TorchDevices-filter');
    input.value = 'bat';
    input.dispatchEvent(new Event('input'));
    input.value = 'batch';
    input.dispatchEvent(new Event('input'));
    expect(h.comm.sent.filter(m => m.type === 'window')).toHaveLength(0);
    jest.advanceTimersByTime(FILTER_DELAY_MS + 1);
    const requests = h.comm.sent.filter(m => m.type === 'window');
    expect(requests).toHaveLength(1);
    expect(requests[0]).toMatchObject({ spec: { filter: 'batch', offset: 0, limit: 200 } });
    // the kernel answers with the narrowed window; the box keeps what was typed
    const narrowed = withView('basic', v => {
      v.seq = 3;
      v.window.spec.filter = 'batch';
      v.window.rows = v.window.rows.filter(r => r.name.startsWith('batch'));
      v.window.matching = v.window.rows.length;
    });
    h.comm.receive(narrowed);
    expect(rowNames(h.panel)).toEqual(['batch[0]', 'batch[1]']);
    expect(input.value).toBe('batch');
    expect(text(h.panel, '.jp-TorchDevices-summary')).toBe('Rows 1–2 of 2 (filtered from 7)');
  });

  it('a header click asks for that sort; again reverses it', async () => {
    const h = await harness();
    q<HTMLButtonElement>(h.panel.node, 'button[data-sort="name"]').click();
    expect(lastRequest(h)).toMatchObject({
      type: 'window',
      spec: { sort: 'name', reverse: false }
    });
    h.comm.receive(withView('basic', v => ((v.seq = 3), (v.window.spec.sort = 'name'))));
    q<HTMLButtonElement>(h.panel.node, 'button[data-sort="name"]').click();
    expect(lastRequest(h)).toMatchObject({ spec: { sort: 'name', reverse: true } });
  });

  it('the target select asks for the window with that target', async () => {
    const h = await harness();
    const select = q<HTMLSelectElement>(h.panel.node, 'select.jp-TorchDevices-target');
    expect(select.value).toBe('meta');
    select.value = 'cpu';
    select.dispatchEvent(new Event('change'));
    expect(lastRequest(h)).toMatchObject({ type: 'window', spec: { target: 'cpu' } });
  });

  it('the pager asks for the next window', async () => {
    const view = withView('basic', v => {
      v.window.spec.limit = 3;
      v.window.rows = v.window.rows.slice(0, 3);
    });
    const h = await harness(view);
    q<HTMLButtonElement>(h.panel.node, 'button.jp-TorchDevices-next').click();
    expect(lastRequest(h)).toMatchObject({ type: 'window', spec: { offset: 3, limit: 3 } });
  });
});

describe('the status line', () => {
  it('says what a move skipped, in words', async () => {
    const h = await harness();
    q<HTMLButtonElement>(h.panel.node, 'button.jp-TorchDevices-moveAll').click();
    const request = lastRequest(h);
    h.comm.receive({
      protocol: 'torchdevice_magic',
      version: 4,
      type: 'reply',
      seq: 2,
      request_id: request.request_id,
      ok: true,
      message: 'Moved 3 objects (37.2 KiB) to meta in 2 ms; 1 skipped',
      outcome: {
        action: 'move',
        ok: true,
        message: 'Moved 3 objects (37.2 KiB) to meta in 2 ms; 1 skipped',
        skipped: [{ name: 'opt', reason: 'optimizer state is already with its parameters' }],
        time: 0
      }
    });
    expect(text(h.panel, '.jp-TorchDevices-status')).toBe(
      'Moved 3 objects (37.2 KiB) to meta in 2 ms; 1 skipped — skipped opt: optimizer state is already with its parameters'
    );
  });

  it('does not repeat a skip the kernel message already names', async () => {
    const h = await harness();
    q<HTMLButtonElement>(h.panel.node, 'button.jp-TorchDevices-moveAll').click();
    const request = lastRequest(h);
    // MoveResult.summary() names up to three skipped objects with their reasons
    const message =
      'Moved 3 objects (44.0 KiB) to simdev:0 in 5 ms; skipped model (already on simdev:0), ' +
      'optimizer (optimizer state is already with its parameters)';
    h.comm.receive({
      protocol: 'torchdevice_magic',
      version: 4,
      type: 'reply',
      seq: 2,
      request_id: request.request_id,
      ok: true,
      message,
      outcome: {
        action: 'move',
        ok: true,
        message,
        skipped: [{ name: 'optimizer', reason: 'optimizer state is already with its parameters' }],
        time: 0
      }
    });
    expect(text(h.panel, '.jp-TorchDevices-status')).toBe(message);
  });
});

/** An IDeviceSource with no kernel behind it: the panel needs nothing more. */
class PlainSource implements IDeviceSource {
  constructor(view: IViewMessage) {
    this.view = fromView(view);
  }

  readonly changed: Signal<IDeviceSource, void> = new Signal<IDeviceSource, void>(this);
  state: ConnectionState = 'ready';
  view: IMirror | null;
  spec: IWindowSpec = { ...DEFAULT_SPEC };
  timeline = null;
  engines = null;
  enginesReachable = false;
  status: IStatusLine | null = null;
  busy = false;
  actionPending = false;
  connected = true;
  language = 'python';
  received = { view: 1, delta: 0 };
  asked: unknown[][] = [];

  refresh(): string | null {
    this.asked.push(['refresh']);
    return 'r';
  }

  requestWindow(spec: IWindowSpec): string | null {
    this.asked.push(['window', spec.sort]);
    return 'w';
  }

  move(device: string, names: string[] | null): string | null {
    this.asked.push(['move', device, names]);
    return 'm';
  }

  requestEngines(expand: number | null): string | null {
    this.asked.push(['engines', expand]);
    return 'e';
  }

  undo(): string | null {
    this.asked.push(['undo']);
    return 'u';
  }

  loadExtension(): Promise<void> {
    this.asked.push(['load']);
    return Promise.resolve();
  }
}

describe('the panel depends on IDeviceSource only', () => {
  it("draws any source and sends it the user's requests", () => {
    const source = new PlainSource(loadFixture('basic'));
    const panel = new DevicePanel();
    disposables.push(panel);
    panel.setConnection(source, 'plain');
    expect(rowNames(panel)).toEqual(loadFixture('basic').window.rows.map(r => r.name));
    q<HTMLButtonElement>(panel.node, 'button[data-sort="name"]').click();
    q<HTMLButtonElement>(panel.node, 'button.jp-TorchDevices-moveAll').click();
    expect(source.asked).toEqual([
      ['window', 'name'],
      ['move', 'meta', null]
    ]);
    source.state = 'dead';
    source.changed.emit();
    expect(panel.node.dataset.state).toBe('dead');
  });
});
