/**
 * The memory chart: the `timeline` message check, the per-device SVG and its
 * tooltips, and the panel drawing what the kernel sent (and nothing it cannot
 * read).
 */
import {
  buildCharts,
  heldText,
  ITimelineMessage,
  ITimelineRow,
  pointTitle,
  timelineProblem
} from '../timeline';
import { connectedPanel, fixtureNames, IHarness, loadFixture } from './fakes';

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
  ...extra
});

const message = (rows: ITimelineRow[], seq = 3): ITimelineMessage => ({
  protocol: 'torchdevice_magic',
  version: 2,
  type: 'timeline',
  seq,
  rows
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
    expect(timelineProblem(message([{ ...row(1, 1, 1), bytes: 1.5 }]))).toContain("'bytes'");
    expect(
      timelineProblem(message([{ ...row(1, 1, 1), peak: 'big' as unknown as null }]))
    ).toContain("'peak'");
    const badChanges = { ...row(1, 1, 1), changes: [['x', 'y']] as unknown as [string, number][] };
    expect(timelineProblem(message([badChanges]))).toContain("'changes'");
  });
});

describe('buildCharts', () => {
  it('draws one chart per device with a point per cell', () => {
    const rows = [
      row(1, 1024, 1024),
      row(1, 2048, 2048, { device: 'cuda:0' }),
      row(2, 3072, 2048, { changes: [['losses: 8 autograd graphs', 2048]] }),
      row(2, 2048, 0, { device: 'cuda:0' })
    ];
    const charts = buildCharts(rows);
    expect(charts.map(c => c.dataset.device)).toEqual(['cpu', 'cuda:0']);
    const cpu = charts[0];
    expect(cpu.querySelectorAll('circle')).toHaveLength(2);
    expect(cpu.textContent).toContain('cpu: 3.0 KiB held (+2.0 KiB last cell)');
    const title = cpu.querySelectorAll('circle')[1].querySelector('title')!.textContent;
    expect(title).toBe('cell 2, cpu: 3.0 KiB (+2.0 KiB)\nlosses: 8 autograd graphs +2.0 KiB');
    expect(cpu.querySelector('polyline')!.getAttribute('points')!.split(' ')).toHaveLength(2);
  });

  it('keeps names as text (no markup from the kernel)', () => {
    const charts = buildCharts([
      row(5, 10, 10, { changes: [['<img src=x onerror=alert(1)>', 10]] })
    ]);
    expect(charts[0].querySelector('img')).toBeNull();
    expect(charts[0].querySelector('title')!.textContent).toContain('<img src=x onerror=alert(1)>');
  });

  it('says what of the held bytes is outside the variables, as the table counts them', () => {
    expect(heldText(row(3, 50688, 0))).toBe('cpu: 49.5 KiB held (+0 B last cell)');
    expect(heldText(row(3, 50688, 0, { outside: 5632 }))).toBe(
      'cpu: 49.5 KiB held, 5.5 KiB of it outside your variables (+0 B last cell)'
    );
    expect(timelineProblem(message([{ ...row(1, 1, 1), outside: 0.5 }]))).toContain("'outside'");
  });

  it('says the peak and the note', () => {
    const text = pointTitle(
      row(7, 0, -4096, { peak: 8192, note: 'del x freed nothing of 4.0 KiB' })
    );
    expect(text).toBe('cell 7, cpu: 0 B (-4.0 KiB), peak 8.0 KiB\ndel x freed nothing of 4.0 KiB');
  });
});

describe('the panel', () => {
  it('shows the chart the kernel sends after a snapshot, and ignores one it cannot read', async () => {
    harness = await connectedPanel(loadFixture(fixtureNames()[0]));
    const chart = harness.panel.node.querySelector<HTMLElement>('.jp-TorchDeviceMagic-timeline')!;
    expect(chart.hidden).toBe(true);

    harness.comm.receive(message([row(4, 1048576, 1048576, { changes: [['x', 1048576]] })]));
    expect(chart.hidden).toBe(false);
    expect(chart.textContent).toContain('cpu: 1.0 MiB held (+1.0 MiB last cell)');
    expect(harness.connection.timeline?.seq).toBe(3);

    harness.comm.receive({ ...message([]), rows: [{ cell: 'x' }] });
    expect(harness.connection.timeline?.seq).toBe(3); // the bad one was dropped
    expect(chart.textContent).toContain('cpu: 1.0 MiB held');
  });
});
