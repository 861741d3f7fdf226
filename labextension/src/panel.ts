/**
 * The "Devices" sidebar: a Lumino widget drawn with plain DOM.
 *
 * It draws the kernel's view model and decides nothing: rows (with their
 * size text, grads apart, status, and what each row's button does or why it
 * cannot), per-device bars, the totals note, the targets and every button's
 * state and reason all come from the kernel. Sorting, filtering (the search
 * box) and paging are requests for another window, answered by the kernel.
 *
 * The skeleton (header, notice, toolbar, search box, table, pager, status
 * line) is built once; a view only refills the parts that change, so the
 * search box keeps focus while deltas arrive.
 */

import { Widget } from '@lumino/widgets';

import { IAction, IDeviceBar, IHeader, IRow, IWindowSpec } from './protocol';
import { TimelineChart } from './timeline';
import type { ConnectionState, IDeviceSource } from './tokens';
import { IMirror, orderedRows } from './window';

export const PAGE_SIZE = 200;

export type SortKey = IWindowSpec['sort'];

/** What the panel shows besides the connection's own states. */
export type PanelState = ConnectionState | 'no-notebook';

const CLASS = 'jp-TorchDevices';

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

/** How long typing in the search box pauses before the kernel is asked. */
export const FILTER_DELAY_MS = 150;

const NOTICES: Record<PanelState, string> = {
  'no-notebook': 'Open a notebook to see its tensors, modules and optimizers.',
  'no-kernel': 'This notebook has no kernel.',
  starting: 'Waiting for the kernel…',
  'not-python': 'Devices works with Python kernels.',
  connecting: 'Asking the kernel for its devices…',
  'not-loaded': 'torchdevice_magic is not loaded in this kernel.',
  loading: 'Loading torchdevice_magic in this kernel…',
  ready: '',
  restarting: 'The kernel is restarting…',
  dead: 'The kernel is dead. Restart it to see its devices.'
};

export const TORCH_NOT_IMPORTED = 'torch is not imported in this kernel yet.';
export const BUSY_NOTICE = 'kernel busy — showing the last view';

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className?: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function button(className: string, label: string, ariaLabel: string): HTMLButtonElement {
  const node = el('button', `${CLASS}-button ${className}`, label);
  node.type = 'button';
  node.setAttribute('aria-label', ariaLabel);
  return node;
}

/** A button as the kernel says: its label, enabled or not, and why. */
function drawAction(node: HTMLButtonElement, action: IAction, waitReason: string): void {
  node.textContent = action.label;
  node.setAttribute('aria-label', action.label);
  node.disabled = !action.enabled || waitReason !== '';
  node.title = waitReason || action.reason;
}

export class DevicePanel extends Widget {
  constructor() {
    super();
    this.id = 'torchdevice-magic-panel';
    this.addClass(CLASS);
    this.title.caption = 'Devices';
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'Devices');
    this._build();
    this._render();
  }

  /** The notebook's devices shown (any IDeviceSource), or null when no notebook is open. */
  get connection(): IDeviceSource | null {
    return this._connection;
  }

  /** The sort the kernel's window has. */
  get sort(): { key: SortKey; reverse: boolean } {
    const spec = this._connection?.spec;
    return { key: spec?.sort ?? 'size', reverse: spec?.reverse ?? false };
  }

  /** The device the kernel's header says moves go to. */
  get target(): string | null {
    return this._connection?.view?.header.target ?? null;
  }

  /** Show `connection` (one notebook's), labelled `label`; null: no notebook. */
  setConnection(connection: IDeviceSource | null, label = ''): void {
    if (this._connection !== connection) {
      this._connection?.changed.disconnect(this._render, this);
      this._connection = connection;
      this._connection?.changed.connect(this._render, this);
      this._targetsKey = '';
      this._filterInput.value = connection?.spec.filter ?? '';
    }
    this.setLabel(label);
    this._render();
  }

  /** The notebook's name in the header; touches nothing else. */
  setLabel(label: string): void {
    if (this._contextNode.textContent !== label) {
      this._contextNode.textContent = label;
      this._contextNode.title = label;
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._connection?.changed.disconnect(this._render, this);
    this._connection = null;
    super.dispose();
  }

  // ---- skeleton -------------------------------------------------------------

  private _build(): void {
    const header = el('div', `${CLASS}-header`);
    const titleRow = el('div', `${CLASS}-titleRow`);
    titleRow.append(el('h2', `${CLASS}-title`, 'Devices'), this._refreshButton);
    header.append(titleRow, this._contextNode);

    this._noticeNode.append(this._noticeText, this._loadButton);
    this._busyNode.textContent = BUSY_NOTICE;

    const banner = this._bannerNode;
    banner.setAttribute('role', 'alert');

    this._totalsNode.setAttribute('aria-label', 'Memory per device');

    const toolbar = el('div', `${CLASS}-toolbar`);
    this._targetSelect.setAttribute('aria-label', 'Target device');
    this._targetSelect.title = 'Target device';
    toolbar.append(this._targetSelect, this._moveAllButton, this._undoButton);

    this._filterInput.type = 'search';
    this._filterInput.placeholder = 'Search name, type or device';
    this._filterInput.setAttribute('aria-label', 'Search by name, type or device');
    this._filterInput.spellcheck = false;

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
        sortButton.addEventListener('click', () => this._onSort(column.sort!));
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
    const tableWrap = el('div', `${CLASS}-tableWrap`);
    tableWrap.append(this._table);

    this._pagerNode.append(this._prevButton, this._pageText, this._nextButton);

    this._contentNode.append(
      banner,
      this._totalsNode,
      toolbar,
      this._filterInput,
      this._summaryNode,
      tableWrap,
      this._pagerNode
    );

    this._statusNode.setAttribute('role', 'status');
    this._statusNode.setAttribute('aria-live', 'polite');

    this.node.append(
      header,
      this._noticeNode,
      this._busyNode,
      this._contentNode,
      this._timelineChart.node,
      this._statusNode
    );

    this._refreshButton.addEventListener('click', () => this._connection?.refresh());
    this._loadButton.addEventListener('click', () => void this._connection?.loadExtension());
    this._undoButton.addEventListener('click', () => this._connection?.undo());
    this._moveAllButton.addEventListener('click', () => {
      const target = this.target;
      if (target !== null) {
        this._connection?.move(target, null);
      }
    });
    this._targetSelect.addEventListener('change', () => {
      this._ask({ target: this._targetSelect.value || null });
    });
    // the kernel filters: ask for the filtered window once typing pauses
    this._filterInput.addEventListener('input', () => {
      if (this._filterTimer !== null) {
        clearTimeout(this._filterTimer);
      }
      this._filterTimer = setTimeout(() => {
        this._filterTimer = null;
        this._ask({ filter: this._filterInput.value, offset: 0 });
      }, FILTER_DELAY_MS);
    });
    this._tbody.addEventListener('click', event => {
      const target = event.target as HTMLElement | null;
      const rowButton = target?.closest<HTMLButtonElement>(`button.${CLASS}-rowMove`);
      if (!rowButton || rowButton.disabled) {
        return;
      }
      const name = rowButton.dataset.name;
      const device = rowButton.dataset.device;
      if (name !== undefined && device !== undefined) {
        this._connection?.move(device, [name]);
      }
    });
    this._prevButton.addEventListener('click', () => {
      const spec = this._connection?.spec;
      if (spec) {
        this._ask({ offset: Math.max(0, spec.offset - spec.limit) });
      }
    });
    this._nextButton.addEventListener('click', () => {
      const spec = this._connection?.spec;
      if (spec) {
        this._ask({ offset: spec.offset + spec.limit });
      }
    });
  }

  /** Ask the kernel for the window with these changes. */
  private _ask(changes: Partial<IWindowSpec>): void {
    const connection = this._connection;
    if (!connection) {
      return;
    }
    connection.requestWindow({ ...connection.spec, ...changes });
  }

  /** Flush a pending search now (tests; Enter in the box). */
  flushFilter(): void {
    if (this._filterTimer !== null) {
      clearTimeout(this._filterTimer);
      this._filterTimer = null;
      this._ask({ filter: this._filterInput.value, offset: 0 });
    }
  }

  // ---- rendering ------------------------------------------------------------

  private _render(): void {
    const connection = this._connection;
    const state: PanelState = connection ? connection.state : 'no-notebook';
    const view = connection?.view ?? null;
    const showView = state === 'ready' && view !== null;
    const torchImported = showView && view.header.torch_imported;

    this._timelineChart.render(showView ? (connection?.timeline ?? null) : null);
    this.node.dataset.state = state;
    this.node.dataset.busy = String(Boolean(connection?.busy));
    this.node.dataset.views = String(connection?.received.view ?? 0);
    this.node.dataset.deltas = String(connection?.received.delta ?? 0);
    this.node.dataset.torch = showView ? String(view.header.torch_imported) : '';

    // Notice: the state in words, and the Load button when it helps.
    let notice = NOTICES[state];
    if (state === 'not-python' && connection?.language) {
      notice = `Devices works with Python kernels (this kernel runs ${connection.language}).`;
    }
    if (showView && !view.header.torch_imported) {
      notice = TORCH_NOT_IMPORTED;
    }
    this._noticeText.textContent = notice;
    this._noticeNode.hidden = notice === '';
    this._noticeNode.dataset.state = state;
    const canLoad = state === 'not-loaded' || state === 'loading';
    this._loadButton.hidden = !canLoad;
    this._loadButton.disabled = state === 'loading';

    const busy = Boolean(connection?.busy) && (state === 'ready' || state === 'connecting');
    this._busyNode.hidden = !busy;
    this._busyNode.textContent =
      state === 'ready' ? BUSY_NOTICE : 'kernel busy — it will answer when the running cell ends';

    this._refreshButton.disabled = !connection?.connected;

    this._contentNode.hidden = !torchImported;
    if (torchImported) {
      this._renderWarnings(view.header);
      this._renderTotals(view.header);
      this._renderTargets(view.header);
    }
    this._renderActions();
    this._renderRows();
    this._renderStatus();
  }

  private _renderWarnings(header: IHeader): void {
    const warnings = header.warnings;
    this._bannerNode.hidden = warnings.length === 0;
    const list = el('ul', `${CLASS}-bannerList`);
    for (const warning of warnings) {
      list.append(el('li', `${CLASS}-warning`, warning));
    }
    this._bannerNode.replaceChildren(list);
  }

  private _renderTotals(header: IHeader): void {
    const fragment = document.createDocumentFragment();
    for (const total of header.bars as IDeviceBar[]) {
      const row = el('div', `${CLASS}-total`);
      row.dataset.device = total.device;
      const head = el('div', `${CLASS}-totalHead`);
      head.append(
        el('span', `${CLASS}-totalDevice`, total.device),
        el('span', `${CLASS}-totalSize`, total.text)
      );
      const bar = el('div', `${CLASS}-bar`);
      bar.setAttribute('aria-hidden', 'true');
      const fill = el('div', `${CLASS}-barFill`);
      fill.style.width = percent(total.fraction);
      bar.append(fill);
      row.title = `${total.device}: ${total.text}`;
      row.append(head, bar);
      fragment.append(row);
    }
    const note = el('div', `${CLASS}-totalsNote`, header.totals_note);
    note.hidden = header.totals_note === '';
    fragment.append(note);
    this._totalsNode.replaceChildren(fragment);
  }

  private _renderTargets(header: IHeader): void {
    const key = JSON.stringify(header.targets);
    if (key !== this._targetsKey) {
      this._targetsKey = key;
      const options = header.targets.map(target => {
        const option = el(
          'option',
          undefined,
          target.enabled ? target.device : `${target.device} (unavailable)`
        );
        option.value = target.device;
        option.disabled = !target.enabled;
        if (!target.enabled && target.reason) {
          option.title = target.reason;
        }
        return option;
      });
      this._targetSelect.replaceChildren(...options);
    }
    this._targetSelect.value = header.target ?? '';
  }

  private _waitReason(): string {
    const connection = this._connection;
    if (connection?.busy) {
      return 'The kernel is busy; wait for the running cell to finish';
    }
    if (connection?.actionPending) {
      return 'Waiting for the kernel to answer';
    }
    return '';
  }

  private _renderActions(): void {
    const connection = this._connection;
    const view = connection?.view ?? null;
    const ready = connection?.state === 'ready' && view !== null && view.header.torch_imported;
    if (!ready) {
      this._moveAllButton.disabled = true;
      this._undoButton.disabled = true;
      this._targetSelect.disabled = true;
      return;
    }
    const wait = this._waitReason();
    drawAction(this._moveAllButton, view.header.buttons.move_all, wait);
    drawAction(this._undoButton, view.header.buttons.undo, wait);
    this._targetSelect.disabled = view.header.targets.length === 0;
  }

  private _renderRows(): void {
    const connection = this._connection;
    const view: IMirror | null = connection?.view ?? null;
    if (!view || connection?.state !== 'ready' || !view.header.torch_imported) {
      this._tbody.replaceChildren();
      this._rowsView = null;
      this._summaryNode.textContent = '';
      this._pagerNode.hidden = true;
      return;
    }
    const wait = this._waitReason();
    // Rebuild the rows only when what they show changed. Replacing a button
    // between mousedown and mouseup (a status line update, a busy flag) would
    // swallow the click, so other changes only flip `disabled`.
    const rows = orderedRows(view);
    if (this._rowsView === view) {
      for (const node of Array.from(
        this._tbody.querySelectorAll<HTMLButtonElement>(`button.${CLASS}-rowMove`)
      )) {
        const row = view.rows.get(node.dataset.key ?? '');
        if (row) {
          drawAction(node, row.action, wait);
        }
      }
    } else {
      const existing = new Map<string, HTMLTableRowElement>();
      for (const tr of Array.from(this._tbody.rows)) {
        existing.set(tr.dataset.key ?? '', tr);
      }
      const fragment = document.createDocumentFragment();
      for (const row of rows) {
        // a row the delta did not touch keeps its element (and any hover or focus)
        const old = existing.get(row.key);
        const same = old !== undefined && this._drawn.get(row.key) === row;
        fragment.append(same ? old : this._renderRow(row, wait));
      }
      this._tbody.replaceChildren(fragment);
      this._drawn = new Map(rows.map(row => [row.key, row]));
      this._rowsView = view;
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
    this._summaryNode.textContent = summary;
    this._pagerNode.hidden = view.matching <= spec.limit;
    this._pageText.textContent = summary;
    this._prevButton.disabled = start === 0;
    this._nextButton.disabled = start + spec.limit >= view.matching;
  }

  private _renderRow(row: IRow, wait: string): HTMLTableRowElement {
    const tr = el('tr', `${CLASS}-row`);
    tr.dataset.key = row.key;
    tr.dataset.name = row.name;
    tr.dataset.device = row.device;
    tr.dataset.kind = row.kind;
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
    const target = this.target;
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

  private _renderStatus(): void {
    const status = this._connection?.status ?? null;
    this._statusNode.textContent = status?.message ?? '';
    this._statusNode.classList.toggle('jp-mod-error', status?.kind === 'error');
    this._statusNode.classList.toggle('jp-mod-ok', status?.kind === 'ok');
    this._statusNode.dataset.kind = status?.kind ?? '';
  }

  private _onSort(key: SortKey): void {
    const spec = this._connection?.spec;
    if (!spec) {
      return;
    }
    // first click: the kernel's natural order (size: biggest first, names: A→Z)
    const reverse = spec.sort === key ? !spec.reverse : false;
    this._ask({ sort: key, reverse, offset: 0 });
  }

  private _connection: IDeviceSource | null = null;
  private _rowsView: IMirror | null = null;
  private _drawn = new Map<string, IRow>();
  private _targetsKey = '';
  private _filterTimer: ReturnType<typeof setTimeout> | null = null;

  private _contextNode = el('div', `${CLASS}-context`);
  private _refreshButton = button(`${CLASS}-refresh`, 'Refresh', 'Refresh the device list');
  private _noticeNode = el('div', `${CLASS}-notice`);
  private _noticeText = el('p', `${CLASS}-noticeText`);
  private _loadButton = button(
    `${CLASS}-load jp-mod-accept`,
    'Load in this kernel',
    'Load torchdevice_magic in this kernel'
  );
  private _busyNode = el('div', `${CLASS}-busy`);
  private _contentNode = el('div', `${CLASS}-content`);
  private _bannerNode = el('div', `${CLASS}-banner`);
  private _totalsNode = el('section', `${CLASS}-totals`);
  private _targetSelect = el('select', `${CLASS}-target`);
  private _moveAllButton = button(`${CLASS}-moveAll jp-mod-accept`, 'Move all', 'Move all');
  private _undoButton = button(`${CLASS}-undo`, 'Undo', 'Undo the last move');
  private _filterInput = el('input', `${CLASS}-filter`);
  private _summaryNode = el('div', `${CLASS}-summary`);
  private _table = el('table', `${CLASS}-table`);
  private _tbody = el('tbody');
  private _pagerNode = el('div', `${CLASS}-pager`);
  private _prevButton = button(`${CLASS}-prev`, '‹ Previous', 'Previous page of rows');
  private _pageText = el('span', `${CLASS}-pageText`);
  private _nextButton = button(`${CLASS}-next`, 'Next ›', 'Next page of rows');
  private _statusNode = el('div', `${CLASS}-status`);
  private _timelineChart = new TimelineChart();
}

function percent(fraction: number): string {
  const clamped = Math.max(0, Math.min(1, Number.isFinite(fraction) ? fraction : 0));
  return `${(clamped * 100).toFixed(1)}%`;
}
