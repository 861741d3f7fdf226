/**
 * The sidebar's table of rows: the column heads (sort buttons with
 * `aria-sort`), one page of the kernel's window, the row count and the pager.
 * It draws the rows the kernel sent, with their text, and hands every click
 * (a sort, a row's move, a page) to the panel, which asks the kernel.
 */

import { button, CLASS, drawAction, el } from './dom';
import type { IRow, IWindowSpec } from './protocol';
import { IMirror, orderedRows } from './window';

export type SortKey = IWindowSpec['sort'];

interface IColumn {
  key: string;
  label: string;
  sort: SortKey | null;
  className: string;
}

// Name and size first, never cut: they are what a narrow sidebar must show,
// with the device (its column, or a chip by the name where the column gives
// way). The name column sticks to the left edge when the table scrolls sideways.
const COLUMNS: IColumn[] = [
  { key: 'name', label: 'Name', sort: 'name', className: `${CLASS}-cell-name` },
  { key: 'size', label: 'Size', sort: 'size', className: `${CLASS}-cell-size` },
  { key: 'grad', label: 'Grad', sort: null, className: `${CLASS}-cell-grad` },
  { key: 'device', label: 'Device', sort: 'device', className: `${CLASS}-cell-device` },
  { key: 'type', label: 'Type', sort: 'type', className: `${CLASS}-cell-type` },
  { key: 'dtype', label: 'Dtype', sort: null, className: `${CLASS}-cell-dtype` },
  { key: 'shape', label: 'Shape', sort: null, className: `${CLASS}-cell-shape` },
  { key: 'action', label: 'Actions', sort: null, className: `${CLASS}-cell-action` }
];

/** What a click in the table asks for; the panel turns it into a request. */
export interface ITableActions {
  sort(key: SortKey): void;
  /** Move the namespace name `name` (a row's root) to `device`. */
  move(device: string, name: string): void;
  /** The previous (-1) or next (+1) page. */
  page(step: -1 | 1): void;
}

export class RowsTable {
  constructor(actions: ITableActions) {
    this._table.setAttribute('aria-label', 'Tensors, modules and optimizers');
    const headRow = el('tr');
    for (const column of COLUMNS) {
      const th = el('th', column.className);
      th.scope = 'col';
      th.dataset.column = column.key;
      if (column.sort) {
        const sortButton = el('button', `${CLASS}-sort`, column.label);
        sortButton.type = 'button';
        sortButton.dataset.sort = column.sort;
        sortButton.setAttribute('aria-label', `Sort by ${column.label.toLowerCase()}`);
        sortButton.addEventListener('click', () => actions.sort(column.sort!));
        th.append(sortButton);
      } else if (column.key === 'action') {
        th.append(el('span', `${CLASS}-srOnly`, column.label));
      } else {
        th.textContent = column.label;
      }
      headRow.append(th);
    }
    const thead = el('thead');
    thead.append(headRow);
    this._table.append(thead, this._tbody);
    this.tableNode.append(this._table);
    this.pagerNode.append(this._prevButton, this._pageText, this._nextButton);

    this._tbody.addEventListener('click', event => {
      const target = event.target as HTMLElement | null;
      const rowButton = target?.closest<HTMLButtonElement>(`button.${CLASS}-rowMove`);
      if (!rowButton || rowButton.disabled) {
        return;
      }
      const name = rowButton.dataset.name;
      const device = rowButton.dataset.device;
      if (name !== undefined && device !== undefined) {
        actions.move(device, name);
      }
    });
    this._prevButton.addEventListener('click', () => actions.page(-1));
    this._nextButton.addEventListener('click', () => actions.page(1));
  }

  /** "Rows 1–7 of 7", above the table. */
  readonly summaryNode = el('div', `${CLASS}-summary`);
  /** The table, in a box that scrolls sideways. */
  readonly tableNode = el('div', `${CLASS}-tableWrap`);
  readonly pagerNode = el('div', `${CLASS}-pager`);

  /**
   * Draw `view`'s rows (null: none), each row's button moving its root to
   * `target`, disabled with `wait` as the reason when that is not empty.
   */
  render(view: IMirror | null, target: string | null, wait: string): void {
    if (!view) {
      this._tbody.replaceChildren();
      this._rowsView = null;
      this.summaryNode.textContent = '';
      this.pagerNode.hidden = true;
      return;
    }
    // Rebuild the rows only when what they show changed. Replacing a button
    // between mousedown and mouseup (a status line update, a busy flag) would
    // swallow the click, so other changes only flip `disabled`.
    const rows = orderedRows(view);
    if (this._rowsView !== view) {
      const existing = new Map<string, HTMLTableRowElement>();
      for (const tr of Array.from(this._tbody.rows)) {
        existing.set(tr.dataset.key ?? '', tr);
      }
      const fragment = document.createDocumentFragment();
      for (const row of rows) {
        // a row the delta did not touch keeps its element (and any hover or focus)
        const old = existing.get(row.key);
        const same = old !== undefined && this._drawn.get(row.key) === row;
        fragment.append(same ? old : this._renderRow(row, target, wait));
      }
      this._tbody.replaceChildren(fragment);
      this._drawn = new Map(rows.map(row => [row.key, row]));
      this._rowsView = view;
    }
    // Kept buttons were drawn under an earlier wait (a move in flight): draw them for now.
    for (const node of Array.from(
      this._tbody.querySelectorAll<HTMLButtonElement>(`button.${CLASS}-rowMove`)
    )) {
      const row = view.rows.get(node.dataset.key ?? '');
      if (row) {
        drawAction(node, row.action, wait);
      }
    }

    const spec = view.spec;
    for (const th of Array.from(this._table.tHead!.rows[0].cells)) {
      const column = COLUMNS.find(c => c.key === th.dataset.column);
      if (column?.sort) {
        th.setAttribute(
          'aria-sort',
          column.sort === spec.sort ? (spec.reverse ? 'ascending' : 'descending') : 'none'
        );
      }
    }

    const start = spec.offset;
    let summary: string;
    if (view.matching === 0) {
      summary = spec.filter.trim() ? 'No rows match' : 'No rows';
    } else {
      summary = `Rows ${start + 1}–${start + rows.length} of ${view.matching}`;
      if (view.matching !== view.total) {
        summary += ` (filtered from ${view.total})`;
      }
    }
    this.summaryNode.textContent = summary;
    this.pagerNode.hidden = view.matching <= spec.limit;
    this._pageText.textContent = summary;
    this._prevButton.disabled = start === 0;
    this._nextButton.disabled = start + spec.limit >= view.matching;
  }

  private _renderRow(row: IRow, target: string | null, wait: string): HTMLTableRowElement {
    const tr = el('tr', `${CLASS}-row`);
    tr.dataset.key = row.key;
    tr.dataset.name = row.name;
    tr.dataset.device = row.device;
    tr.dataset.kind = row.kind;
    // its data spans several devices ("cpu, meta"): its device text is marked (base.css)
    tr.classList.toggle('jp-mod-mixed', row.mixed === true);
    // held only by IPython's output history (Out[2], _): dimmed, as it is outside the totals
    tr.classList.toggle('jp-mod-hidden', row.hidden === true);
    if (row.status) {
      tr.title = row.status;
    }
    const name = el('td', `${CLASS}-cell-name`);
    // The device is never hidden: where the Device column gives way to a
    // narrow sidebar, this chip by the name shows it (style/base.css).
    const chip = el('span', `${CLASS}-deviceChip`, row.device);
    chip.dataset.device = row.device;
    name.append(el('span', `${CLASS}-name`, row.name), chip);
    name.title = [row.name, `${row.type} (${row.kind}) on ${row.device}`, row.status]
      .filter(Boolean)
      .join('\n');
    const size = el('td', `${CLASS}-cell-size`, row.size);
    size.title = `${row.size_bytes} bytes`;
    const grad = el('td', `${CLASS}-cell-grad`, row.grad);
    if (row.grad) {
      grad.title = `gradient: ${row.grad_bytes} bytes`;
    }
    const device = el('td', `${CLASS}-cell-device`, row.device);
    const type = el('td', `${CLASS}-cell-type`, row.type);
    type.title = row.kind;
    const dtype = el('td', `${CLASS}-cell-dtype`, row.dtype || '—');
    const shape = el('td', `${CLASS}-cell-shape`, row.shape || '—');
    const action = el('td', `${CLASS}-cell-action`);
    if (row.action.enabled && target !== null) {
      // the kernel moves namespace names: a part (`batch[0]`) moves with its root
      const move = button(`${CLASS}-rowMove`, row.action.label, row.action.reason);
      move.dataset.key = row.key;
      move.dataset.name = row.root;
      move.dataset.device = target;
      drawAction(move, row.action, wait);
      action.append(move);
    } else {
      action.title = row.action.reason;
    }
    tr.append(name, size, grad, device, type, dtype, shape, action);
    return tr;
  }

  private _rowsView: IMirror | null = null;
  private _drawn = new Map<string, IRow>();
  private _table = el('table', `${CLASS}-table`);
  private _tbody = el('tbody');
  private _prevButton = button(`${CLASS}-prev`, '‹ Previous', 'Previous page of rows');
  private _pageText = el('span', `${CLASS}-pageText`);
  private _nextButton = button(`${CLASS}-next`, 'Next ›', 'Next page of rows');
}
