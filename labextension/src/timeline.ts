/**
 * The memory chart: bytes held per device over the last cells, from the
 * kernel's `timeline` message (torchdevice_magic.memory / protocol.py). One
 * line per device; each point's tooltip says that cell's change and what grew
 * or shrank, by name. It draws what the kernel sent and decides nothing: the
 * label and the tooltips are the kernel's words (viewmodel/timeline.py), every
 * size written by units.py's format_bytes; nothing here formats a number.
 *
 * Self-contained on purpose (its own message check, its own DOM): the panel
 * only appends `node` and calls `render`.
 */

import * as protocol from './protocol';

/** The generated row (protocol.py), with its `changes` checked into pairs. */
export interface ITimelineRow extends Omit<protocol.ITimelineRow, 'changes'> {
  changes: [string, number][];
}

export interface ITimelineMessage {
  protocol: string;
  version: number;
  type: 'timeline';
  seq: number;
  rows: ITimelineRow[];
}

const SVG = 'http://www.w3.org/2000/svg';
const CLASS = 'jp-TorchDeviceMagic-timeline';
/** Most cells drawn (the kernel sends at most 200 rows). */
export const MAX_CELLS = 40;

export function isTimelineLike(data: unknown): boolean {
  return (
    typeof data === 'object' &&
    data !== null &&
    (data as Record<string, unknown>).type === 'timeline'
  );
}

const isInt = (value: unknown): boolean => typeof value === 'number' && Number.isInteger(value);

/** Why `data` is not a timeline message this chart can draw, or null. */
export function timelineProblem(data: unknown): string | null {
  if (!isTimelineLike(data)) {
    return 'not a timeline message';
  }
  const message = data as Record<string, unknown>;
  if (!isInt(message.seq) || !Array.isArray(message.rows)) {
    return "timeline needs an integer 'seq' and a list 'rows'";
  }
  for (const row of message.rows as unknown[]) {
    if (typeof row !== 'object' || row === null) {
      return 'timeline rows must be objects';
    }
    const r = row as Record<string, unknown>;
    for (const key of ['cell', 'bytes', 'delta', 'outside']) {
      if (!isInt(r[key])) {
        return `timeline row: '${key}' must be an integer`;
      }
    }
    for (const key of ['device', 'note', 'label', 'tooltip']) {
      if (typeof r[key] !== 'string') {
        return `timeline row: '${key}' must be a string`;
      }
    }
    if (r.peak !== null && !isInt(r.peak)) {
      return "timeline row: 'peak' must be an integer or null";
    }
    if (
      !Array.isArray(r.changes) ||
      !r.changes.every(
        c => Array.isArray(c) && c.length === 2 && typeof c[0] === 'string' && isInt(c[1])
      )
    ) {
      return "timeline row: 'changes' must be [name, bytes] pairs";
    }
  }
  return null;
}

function svgNode<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attributes: Record<string, string | number>
): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) {
    node.setAttribute(key, String(value));
  }
  return node;
}

/**
 * One small SVG per device: bytes over the last MAX_CELLS cells, a point per
 * cell with its tooltip (text only: every name goes in as textContent).
 */
export function buildCharts(rows: ITimelineRow[], width = 240, height = 48): HTMLDivElement[] {
  const byDevice = new Map<string, ITimelineRow[]>();
  for (const row of rows) {
    const list = byDevice.get(row.device) ?? [];
    list.push(row);
    byDevice.set(row.device, list);
  }
  const charts: HTMLDivElement[] = [];
  for (const [device, all] of byDevice) {
    const shown = all.slice(-MAX_CELLS);
    const top = Math.max(1, ...shown.map(r => Math.max(r.bytes, r.peak ?? 0)));
    const step = shown.length > 1 ? (width - 8) / (shown.length - 1) : 0;
    const x = (i: number): number => 4 + i * step;
    const y = (bytes: number): number => height - 4 - ((height - 8) * bytes) / top;

    const box = document.createElement('div');
    box.className = `${CLASS}-device`;
    box.dataset.device = device;
    const label = document.createElement('div');
    label.className = `${CLASS}-label`;
    const last = shown[shown.length - 1];
    label.textContent = last.label;
    // as wide as the sidebar lets it be (the viewBox scales; nothing runs off the edge)
    const svg = svgNode('svg', {
      width: '100%',
      height,
      viewBox: `0 0 ${width} ${height}`,
      role: 'img',
      'aria-label': `memory held on ${device} over the last ${shown.length} cells`
    });
    svg.append(
      svgNode('polyline', {
        points: shown.map((r, i) => `${x(i)},${y(r.bytes)}`).join(' '),
        fill: 'none',
        stroke: 'currentColor',
        'stroke-width': 1.5
      })
    );
    shown.forEach((row, i) => {
      const point = svgNode('circle', {
        cx: x(i),
        cy: y(row.bytes),
        r: row.delta > 0 ? 3 : 2,
        class: `${CLASS}-point`,
        'data-cell': row.cell
      });
      const title = svgNode('title', {});
      title.textContent = row.tooltip;
      point.append(title);
      svg.append(point);
    });
    box.append(label, svg);
    charts.push(box);
  }
  return charts;
}

/** The chart's DOM: the panel appends `node` and calls `render` on changes. */
export class TimelineChart {
  readonly node: HTMLDivElement;

  constructor() {
    this.node = document.createElement('div');
    this.node.className = CLASS;
    this.node.hidden = true;
  }

  /** Draw the message (null or no rows: hide the chart). */
  render(message: ITimelineMessage | null): void {
    if (message === this._drawn) {
      return;
    }
    this._drawn = message;
    const rows = message?.rows ?? [];
    this.node.replaceChildren(...buildCharts(rows));
    this.node.hidden = rows.length === 0;
  }

  private _drawn: ITimelineMessage | null = null;
}
