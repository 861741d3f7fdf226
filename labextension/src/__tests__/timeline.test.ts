/**
 * The memory chart: the `timeline` message check, the per-device SVG and its
 * tooltips, and the panel drawing what the kernel sent (and nothing it cannot
 * read).
 */
import * as fs from 'fs';
import * as path from 'path';

import {
  buildCharts,
  ITimelineMessage,
  ITimelineRow,
  MAX_CELLS,
  mergeTimeline,
  timelineProblem
} from '../timeline';
import {
  connectedPanel,
  FIXTURE_DIR,
  fixtureNames,
  IHarness,
  loadFixture,
  rowNames
} from './fakes';

/** The kernel's timeline message for a table of sizes (tests/test_fixtures.py writes it). */
const kernelTimeline = (): ITimelineMessage =>
  JSON.parse(fs.readFileSync(path.join(FIXTURE_DIR, 'timeline.json'), 'utf-8')) as ITimelineMessage;

const row = (
  cell: number,
  bytes: number,
  delta: number,
  extra: Partial<ITimelineRow> = {}
): ITimelineRow => ({
  cell,
  device: 'cpu',
  bytes,
  delta,
  peak: null,
  changes: [],
  note: '',
  outside: 0,
  label: `cpu: ${bytes} bytes held`,
  tooltip: `cell ${cell}: ${delta} bytes`,
  ...extra
});

const message = (
  rows: ITimelineRow[],
  seq = 3,
  follows: number | null = null
): ITimelineMessage => ({
  protocol: 'torchdevice_magic',
  version: 4,
  type: 'timeline',
  seq,
  rows,
  follows
});

let harness: IHarness | null = null;

afterEach(() => {
  harness?.panel.dispose();
  harness?.connection.dispose();
  harness = null;
  document.body.innerHTML = '';
});

describe('timelineProblem', () => {
  it('accepts what the kernel sends', () => {
    const rows = [
      row(2, 4194304, 4194304, { changes: [['Out[2] (also _2, _)', 4194304]] }),
      row(3, 4194304, 0, { device: 'cuda:0', peak: 8388608, note: 'del x freed nothing' })
    ];
    expect(timelineProblem(message(rows))).toBeNull();
  });

  it('names what is wrong', () => {
    expect(timelineProblem({ type: 'snapshot' })).toBe('not a timeline message');
    expect(timelineProblem({ ...message([]), rows: 'x' })).toContain("'rows'");
    expect(timelineProblem({ ...message([]), follows: 'x' })).toContain("'follows'");
    expect(timelineProblem(message([{ ...row(1, 1, 1), bytes: 1.5 }]))).toContain("'bytes'");
    expect(
      timelineProblem(message([{ ...row(1, 1, 1), peak: 'big' as unknown as null }]))
    ).toContain("'peak'");
    const badChanges = { ...row(1, 1, 1), changes: [['x', 'y']] as unknown as [string, number][] };
    expect(timelineProblem(message([badChanges]))).toContain("'changes'");
  });
});

describe('mergeTimeline', () => {
  it("adds the rows of a message that follows the chart's last one", () => {
    const first = mergeTimeline(null, message([row(1, 10, 10), row(2, 20, 10)], 4));
    const next = mergeTimeline(first, message([row(3, 30, 10)], 7, 4));
    expect(next.rows.map(r => r.cell)).toEqual([1, 2, 3]);
    expect(next.seq).toBe(7);
    expect(first.rows.map(r => r.cell)).toEqual([1, 2]); // a new object: the chart redraws
  });

  it('starts again from a whole chart, or after a message it never had', () => {
    const first = mergeTimeline(null, message([row(1, 10, 10)], 4));
    expect(mergeTimeline(first, message([row(5, 50, 0)], 6)).rows.map(r => r.cell)).toEqual([5]);
    // follows seq 5, which was dropped: a chart with a hole would draw a wrong line
    const gap = mergeTimeline(first, message([row(6, 60, 10)], 8, 5));
    expect(gap.rows.map(r => r.cell)).toEqual([6]);
  });

  it('keeps the last MAX_CELLS cells of each device', () => {
    let chart = mergeTimeline(null, message([row(0, 1, 1, { device: 'cuda:0' })], 1));
    for (let cell = 1; cell <= MAX_CELLS + 5; cell++) {
      chart = mergeTimeline(chart, message([row(cell, cell, 1)], cell + 1, cell));
    }
    const cpu = chart.rows.filter(r => r.device === 'cpu').map(r => r.cell);
    expect(cpu).toHaveLength(MAX_CELLS);
    expect(cpu[cpu.length - 1]).toBe(MAX_CELLS + 5);
    expect(chart.rows.filter(r => r.device === 'cuda:0')).toHaveLength(1);
  });
});

describe('buildCharts', () => {
  it('draws one chart per device with a point per cell', () => {
    const rows = [
      row(1, 1024, 1024),
      row(1, 2048, 2048, { device: 'cuda:0' }),
      row(2, 3072, 2048, { label: 'cpu: the kernel says 3 KiB' }),
      row(2, 2048, 0, { device: 'cuda:0' })
    ];
    const charts = buildCharts(rows);
    expect(charts.map(c => c.dataset.device)).toEqual(['cpu', 'cuda:0']);
    const cpu = charts[0];
    expect(cpu.querySelectorAll('circle')).toHaveLength(2);
    expect(cpu.querySelector('.jp-TorchDeviceMagic-timeline-label')!.textContent).toBe(
      'cpu: the kernel says 3 KiB'
    );
    const title = cpu.querySelectorAll('circle')[1].querySelector('title')!.textContent;
    expect(title).toBe('cell 2: 2048 bytes');
    expect(cpu.querySelector('polyline')!.getAttribute('points')!.split(' ')).toHaveLength(2);
  });

  it("keeps the kernel's words as text (no markup from the kernel)", () => {
    const charts = buildCharts([
      row(5, 10, 10, { tooltip: 'cell 5\n<img src=x onerror=alert(1)>' })
    ]);
    expect(charts[0].querySelector('img')).toBeNull();
    expect(charts[0].querySelector('title')!.textContent).toContain('<img src=x onerror=alert(1)>');
  });

  it("shows every size as the kernel wrote it, on the kernel's table of sizes", () => {
    const message = kernelTimeline();
    expect(timelineProblem(message)).toBeNull();
    const chart = buildCharts(message.rows)[0];
    const last = message.rows[message.rows.length - 1];
    expect(chart.querySelector('.jp-TorchDeviceMagic-timeline-label')!.textContent).toBe(
      last.label
    );
    const titles = Array.from(chart.querySelectorAll('circle title')).map(t => t.textContent);
    expect(titles).toEqual(message.rows.map(r => r.tooltip));
    // 1,280 B is 1.25 KiB: the kernel writes 1.2 KiB where toFixed(1) would write 1.3 KiB
    const row1280 = message.rows.find(r => r.bytes === 1280)!;
    expect(titles[message.rows.indexOf(row1280)]).toMatch(/^cell \d+, cpu: 1\.2 KiB /);
  });

  it('a row without its words is not drawn', () => {
    const bare: Partial<ITimelineRow> = row(1, 1, 1);
    delete bare.label;
    expect(timelineProblem(message([bare as ITimelineRow]))).toContain("'label'");
    expect(timelineProblem(message([{ ...row(1, 1, 1), outside: 0.5 }]))).toContain("'outside'");
  });
});

describe('the panel', () => {
  it('shows the chart the kernel sends after a snapshot, and ignores one it cannot read', async () => {
    harness = await connectedPanel(loadFixture(fixtureNames()[0]));
    const chart = harness.panel.node.querySelector<HTMLElement>('.jp-TorchDeviceMagic-timeline')!;
    expect(chart.hidden).toBe(true);

    harness.comm.receive(kernelTimeline());
    expect(chart.hidden).toBe(false);
    const rows = kernelTimeline().rows;
    expect(chart.textContent).toContain(rows[rows.length - 1].label);
    expect(harness.connection.timeline?.seq).toBe(5);

    harness.comm.receive({ ...message([]), rows: [{ cell: 'x' }] });
    expect(harness.connection.timeline?.seq).toBe(5); // the bad one was dropped
    expect(chart.textContent).toContain(rows[rows.length - 1].label);
  });

  it("adds each cell's rows to the chart it has", async () => {
    harness = await connectedPanel(loadFixture(fixtureNames()[0]));
    const chart = harness.panel.node.querySelector<HTMLElement>('.jp-TorchDeviceMagic-timeline')!;
    const whole = kernelTimeline();
    harness.comm.receive(whole);
    const next = row(99, 4096, 1024, { label: 'cpu: after cell 99' });
    harness.comm.receive(message([next], whole.seq + 1, whole.seq));
    expect(harness.connection.timeline?.rows).toEqual([...whole.rows, next]);
    expect(chart.querySelectorAll('circle')).toHaveLength(whole.rows.length + 1);
    expect(chart.textContent).toContain('cpu: after cell 99');
  });

  it("a cell's one delta carries its rows: the table and the chart both follow", async () => {
    const view = loadFixture(fixtureNames()[0]);
    harness = await connectedPanel(view);
    const chart = harness.panel.node.querySelector<HTMLElement>('.jp-TorchDeviceMagic-timeline')!;
    const whole = kernelTimeline();
    const delta = (seq: number, timeline: object | null, remove: string[] = []): object => ({
      protocol: 'torchdevice_magic',
      version: 4,
      type: 'delta',
      seq,
      base: seq - 1,
      header: null,
      window: {
        upsert: [],
        remove,
        splices: [
          {
            at: 0,
            remove: view.window.rows.length,
            insert: view.window.rows.map(r => r.key).filter(k => !remove.includes(k))
          }
        ],
        matching: view.window.matching - remove.length,
        total: view.window.total - remove.length
      },
      last_action: null,
      timeline
    });
    const sentBefore = harness.comm.sent.length;
    harness.comm.receive(delta(view.seq + 1, { rows: whole.rows, follows: null }));
    expect(harness.connection.timeline?.rows).toEqual(whole.rows);
    expect(chart.hidden).toBe(false);
    const gone = view.window.rows[0];
    const next = row(99, 4096, 1024, { label: 'cpu: after cell 99' });
    harness.comm.receive(delta(view.seq + 2, { rows: [next], follows: view.seq + 1 }, [gone.key]));
    expect(harness.connection.timeline?.rows).toEqual([...whole.rows, next]);
    expect(chart.textContent).toContain('cpu: after cell 99');
    expect(rowNames(harness.panel)).not.toContain(gone.name);
    // a delta without rows keeps the chart
    harness.comm.receive(delta(view.seq + 3, null, [gone.key]));
    expect(harness.connection.timeline?.rows).toEqual([...whole.rows, next]);
    expect(harness.comm.sent.length).toBe(sentBefore); // every delta applied in step
  });
});

describe('the chart a view carries', () => {
  it("draws the opening view's chart at once; a refresh's whole chart replaces it, never doubled", async () => {
    const view = loadFixture(fixtureNames()[0]);
    const whole = kernelTimeline();
    const opening = { ...view, timeline: { rows: whole.rows, follows: null } };
    harness = await connectedPanel(opening);
    const chart = harness.panel.node.querySelector<HTMLElement>('.jp-TorchDeviceMagic-timeline')!;
    expect(chart.hidden).toBe(false);
    expect(harness.connection.timeline?.rows).toEqual(whole.rows);
    expect(chart.querySelectorAll('circle')).toHaveLength(whole.rows.length);

    const next = row(99, 4096, 1024, { label: 'cpu: after cell 99' });
    harness.comm.receive(message([next], view.seq + 1, view.seq));
    expect(harness.connection.timeline?.rows).toEqual([...whole.rows, next]);

    // a window request's view keeps the chart; a refresh's view sends it whole again
    harness.comm.receive({ ...view, seq: view.seq + 2, timeline: null });
    expect(harness.connection.timeline?.rows).toEqual([...whole.rows, next]);
    const refreshed = [...whole.rows, next];
    harness.comm.receive({
      ...view,
      seq: view.seq + 3,
      timeline: { rows: refreshed, follows: null }
    });
    expect(harness.connection.timeline?.rows).toEqual(refreshed);
    expect(chart.querySelectorAll('circle')).toHaveLength(refreshed.length);
  });
});
