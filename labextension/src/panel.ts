/**
 * The "Devices" sidebar: a Lumino widget drawn with plain DOM.
 *
 * The skeleton (header, notice, toolbar, filter box, table, pager, status
 * line) is built once; a snapshot only refills the parts that change, so the
 * filter box keeps focus while snapshots arrive. The table shows one page of
 * at most PAGE_SIZE rows, which keeps a kernel with thousands of tensors fast.
 */

import { Widget } from '@lumino/widgets';

import { ConnectionState, DeviceConnection } from './connection';
import { formatBytes, formatShape } from './format';
import { IDeviceTotal, IRow, ISnapshot, ITarget } from './protocol';
import { TimelineChart } from './timeline';

export const PAGE_SIZE = 200;

export type SortKey = 'name' | 'type' | 'device' | 'size';
export type SortDirection = 'asc' | 'desc';

/** What the panel shows besides the connection's own states. */
export type PanelState = ConnectionState | 'no-notebook';

const CLASS = 'jp-TorchDevices';

interface IColumn {
  key: string;
  label: string;
  sort: SortKey | null;
  className: string;
}

// Name, device and size first: they are what a narrow sidebar must show
// without scrolling. The action column sticks to the right edge (CSS).
const COLUMNS: IColumn[] = [
  { key: 'name', label: 'Name', sort: 'name', className: `${CLASS}-cell-name` },
  { key: 'device', label: 'Device', sort: 'device', className: `${CLASS}-cell-device` },
  { key: 'size', label: 'Size', sort: 'size', className: `${CLASS}-cell-size` },
  { key: 'type', label: 'Type', sort: 'type', className: `${CLASS}-cell-type` },
  { key: 'dtype', label: 'Dtype', sort: null, className: `${CLASS}-cell-dtype` },
  { key: 'shape', label: 'Shape', sort: null, className: `${CLASS}-cell-shape` },
  { key: 'action', label: 'Actions', sort: null, className: `${CLASS}-cell-action` }
];

/** First click on a column sorts this way. */
const FIRST_DIRECTION: Record<SortKey, SortDirection> = {
  name: 'asc',
  type: 'asc',
  device: 'asc',
  size: 'desc'
};

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
export const BUSY_NOTICE = 'kernel busy — showing the last snapshot';

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

/** How a row's device reads: "cpu", or "cpu + meta" for a mixed module. */
export function rowDevice(row: IRow): string {
  return row.mixed && row.devices.length > 1 ? row.devices.join(' + ') : row.device;
}

/** Whether `row` gets a "→ target" button: it is movable and the move would change something. */
export function rowNeedsMove(row: IRow, target: string | null): boolean {
  if (!row.movable || target === null) {
    return false;
  }
  if (row.mixed) {
    return true;
  }
  return row.device !== target;
}

function compareText(a: string, b: string): number {
  return a.localeCompare(b, undefined, { numeric: true, sensitivity: 'base' });
}

export function sortRows(rows: IRow[], key: SortKey, direction: SortDirection): IRow[] {
  const sign = direction === 'asc' ? 1 : -1;
  // As the kernel orders rows: what the object takes or, on meta, would take.
  const bySize = (a: IRow, b: IRow): number => sizeKey(a) - sizeKey(b) || a.bytes - b.bytes;
  const compare = (a: IRow, b: IRow): number => {
    const byName = compareText(a.name, b.name);
    switch (key) {
      case 'name':
        return sign * byName;
      case 'type':
        return sign * compareText(a.type, b.type) || byName;
      case 'device':
        // Within a device, biggest first whichever way the devices go.
        return sign * compareText(rowDevice(a), rowDevice(b)) || -bySize(a, b) || byName;
      case 'size':
        return sign * bySize(a, b) || byName;
    }
  };
  return [...rows].sort(compare);
}

/** The size rows sort by, as the kernel's own ordering: max(bytes, would_need_bytes). */
export function sizeKey(row: IRow): number {
  return Math.max(row.bytes, row.would_need_bytes);
}

/** Rows whose name, type or device contain every word of `query`. */
export function filterRows(rows: IRow[], query: string): IRow[] {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  if (words.length === 0) {
    return rows;
  }
  return rows.filter(row => {
    const haystack =
      `${row.name}\n${row.type}\n${row.device}\n${row.devices.join('\n')}`.toLowerCase();
    return words.every(word => haystack.includes(word));
  });
}

/** The target the panel starts with: the user's pick, else the kernel's default, else the first enabled one. */
/**
 * The target to show: the one the user picked while it stays available; otherwise the
 * kernel's default (which changes with config, e.g. when meta is enabled); otherwise the
 * current one, or the first enabled target.
 */
export function chooseTarget(
  snapshot: ISnapshot,
  current: string | null,
  picked = false
): string | null {
  const enabled = snapshot.targets.filter(t => t.enabled).map(t => t.device);
  if (picked && current !== null && enabled.includes(current)) {
    return current;
  }
  if (snapshot.default_target !== null && enabled.includes(snapshot.default_target)) {
    return snapshot.default_target;
  }
  if (current !== null && enabled.includes(current)) {
    return current;
  }
  return enabled.length > 0 ? enabled[0] : null;
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

  /** The connection shown, or null when no notebook is open. */
  get connection(): DeviceConnection | null {
    return this._connection;
  }

  get sort(): { key: SortKey; direction: SortDirection } {
    return { key: this._sortKey, direction: this._sortDirection };
  }

  /** The device selected as the move target. */
  get target(): string | null {
    return this._target;
  }

  /** Show `connection` (one notebook's), labelled `label`; null: no notebook. */
  setConnection(connection: DeviceConnection | null, label = ''): void {
    if (this._connection !== connection) {
      this._connection?.changed.disconnect(this._render, this);
      if (this._connection && this._picked) {
        this._targets.set(this._connection, this._target);
      }
      this._connection = connection;
      this._connection?.changed.connect(this._render, this);
      // a notebook remembers only a target the user picked there
      const remembered = connection ? this._targets.get(connection) : undefined;
      this._picked = remembered !== undefined;
      this._target = remembered ?? null;
      this._page = 0;
      this._targetsKey = '';
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
    this._filterInput.placeholder = 'Filter by name, type or device';
    this._filterInput.setAttribute('aria-label', 'Filter by name, type or device');
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
      if (this._target !== null) {
        this._connection?.move(this._target, null);
      }
    });
    this._targetSelect.addEventListener('change', () => {
      this._target = this._targetSelect.value || null;
      this._picked = true;
      this._render();
    });
    this._filterInput.addEventListener('input', () => {
      this._filter = this._filterInput.value;
      this._page = 0;
      this._renderRows();
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
      this._page = Math.max(0, this._page - 1);
      this._renderRows();
    });
    this._nextButton.addEventListener('click', () => {
      this._page += 1;
      this._renderRows();
    });
  }

  // ---- rendering ------------------------------------------------------------

  private _render(): void {
    const connection = this._connection;
    const state: PanelState = connection ? connection.state : 'no-notebook';
    const snapshot = connection?.snapshot ?? null;
    const showSnapshot = state === 'ready' && snapshot !== null;
    const torchImported = showSnapshot && snapshot.torch_imported;

    this._timelineChart.render(showSnapshot ? (connection?.timeline ?? null) : null);
    this.node.dataset.state = state;
    this.node.dataset.busy = String(Boolean(connection?.busy));
    this.node.dataset.torch = showSnapshot ? String(snapshot.torch_imported) : '';

    // Notice: the state in words, and the Load button when it helps.
    let notice = NOTICES[state];
    if (state === 'not-python' && connection?.language) {
      notice = `Devices works with Python kernels (this kernel runs ${connection.language}).`;
    }
    if (showSnapshot && !snapshot.torch_imported) {
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
      this._renderWarnings(snapshot);
      this._renderTotals(snapshot.devices);
      this._renderTargets(snapshot);
    }
    this._renderActions();
    this._renderRows();
    this._renderStatus();
  }

  private _renderWarnings(snapshot: ISnapshot): void {
    const warnings = snapshot.warnings;
    this._bannerNode.hidden = warnings.length === 0;
    const list = el('ul', `${CLASS}-bannerList`);
    for (const warning of warnings) {
      list.append(el('li', `${CLASS}-warning`, warning));
    }
    this._bannerNode.replaceChildren(list);
  }

  private _renderTotals(totals: IDeviceTotal[]): void {
    // Devices without a known capacity are drawn against the largest of them.
    let largest = 0;
    for (const total of totals) {
      if (total.capacity === null) {
        largest = Math.max(largest, total.bytes, total.would_need_bytes);
      }
    }
    const fragment = document.createDocumentFragment();
    for (const total of totals) {
      const row = el('div', `${CLASS}-total`);
      row.dataset.device = total.device;

      const head = el('div', `${CLASS}-totalHead`);
      head.append(
        el('span', `${CLASS}-totalDevice`, total.device),
        el('span', `${CLASS}-totalSize`, formatBytes(total.bytes))
      );

      const bar = el('div', `${CLASS}-bar`);
      bar.setAttribute('aria-hidden', 'true');
      const fill = el('div', `${CLASS}-barFill`);
      let fraction: number;
      if (total.capacity !== null && total.capacity > 0) {
        fraction = total.bytes / total.capacity;
        if (total.reserved !== null) {
          const reserved = el('div', `${CLASS}-barReserved`);
          reserved.style.width = percent(total.reserved / total.capacity);
          bar.append(reserved);
        }
      } else if (total.bytes === 0 && total.would_need_bytes > 0) {
        fill.classList.add('jp-mod-wouldNeed');
        fraction = largest > 0 ? total.would_need_bytes / largest : 0;
      } else {
        fraction = largest > 0 ? total.bytes / largest : 0;
      }
      fill.style.width = percent(fraction);
      bar.append(fill);

      const metaParts: string[] = [];
      // On real devices would_need_bytes equals bytes; it says something on meta.
      if (total.would_need_bytes > total.bytes) {
        metaParts.push(`would need ${formatBytes(total.would_need_bytes)}`);
      }
      if (total.allocated !== null) {
        metaParts.push(`allocated ${formatBytes(total.allocated)}`);
      }
      if (total.reserved !== null) {
        metaParts.push(`reserved ${formatBytes(total.reserved)}`);
      }
      if (total.capacity !== null) {
        metaParts.push(`of ${formatBytes(total.capacity)}`);
      }
      const meta = el('div', `${CLASS}-totalMeta`, metaParts.join(' · '));
      meta.hidden = metaParts.length === 0;
      row.title = [`${total.device}: ${formatBytes(total.bytes)}`, ...metaParts].join(', ');
      row.append(head, bar, meta);
      fragment.append(row);
    }
    this._totalsNode.replaceChildren(fragment);
  }

  private _renderTargets(snapshot: ISnapshot): void {
    this._target = chooseTarget(snapshot, this._target, this._picked);
    const key = JSON.stringify(snapshot.targets);
    if (key !== this._targetsKey) {
      this._targetsKey = key;
      const options = snapshot.targets.map((target: ITarget) => {
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
    this._targetSelect.value = this._target ?? '';
  }

  private _renderActions(): void {
    const connection = this._connection;
    const snapshot = connection?.snapshot ?? null;
    const ready = connection?.state === 'ready' && snapshot !== null && snapshot.torch_imported;
    const busy = Boolean(connection?.busy);
    const pending = Boolean(connection?.actionPending);
    const waitReason = busy
      ? 'The kernel is busy; wait for the running cell to finish'
      : pending
        ? 'Waiting for the kernel to answer'
        : '';
    const target = this._target;

    const label = target === null ? 'Move all' : `Move all to ${target}`;
    this._moveAllButton.textContent = label;
    this._moveAllButton.setAttribute('aria-label', label);
    const anythingToMove =
      ready &&
      (snapshot.total_rows > snapshot.rows.length ||
        snapshot.rows.some(row => rowNeedsMove(row, target)));
    this._moveAllButton.disabled = !ready || target === null || busy || pending || !anythingToMove;
    this._moveAllButton.title =
      waitReason || (ready && !anythingToMove ? `Everything is on ${target}` : label);

    this._undoButton.disabled = !ready || !snapshot.can_undo || busy || pending;
    this._undoButton.title =
      waitReason || (ready && snapshot.can_undo ? 'Undo the last move' : 'Nothing to undo');
    this._targetSelect.disabled = !ready || snapshot.targets.length === 0;
  }

  private _renderRows(): void {
    const connection = this._connection;
    const snapshot = connection?.snapshot ?? null;
    if (!snapshot || connection?.state !== 'ready' || !snapshot.torch_imported) {
      this._tbody.replaceChildren();
      this._rowsSnapshot = null;
      this._summaryNode.textContent = '';
      this._pagerNode.hidden = true;
      return;
    }
    const filtered = filterRows(snapshot.rows, this._filter);
    const sorted = sortRows(filtered, this._sortKey, this._sortDirection);
    const pages = Math.max(1, Math.ceil(sorted.length / PAGE_SIZE));
    this._page = Math.min(this._page, pages - 1);
    const start = this._page * PAGE_SIZE;
    const visible = sorted.slice(start, start + PAGE_SIZE);

    const canMove = !connection.busy && !connection.actionPending && this._target !== null;
    // Rebuild the rows only when what they show changed. Replacing a button
    // between mousedown and mouseup (a status line update, a busy flag) would
    // swallow the click, so other changes only flip `disabled`.
    const key = [this._target, this._sortKey, this._sortDirection, this._filter, this._page];
    const same =
      this._rowsSnapshot === snapshot &&
      this._rowsKey.length === key.length &&
      this._rowsKey.every((value, i) => value === key[i]);
    if (same) {
      for (const button of Array.from(
        this._tbody.querySelectorAll<HTMLButtonElement>(`button.${CLASS}-rowMove`)
      )) {
        button.disabled = !canMove;
      }
    } else {
      const fragment = document.createDocumentFragment();
      for (const row of visible) {
        fragment.append(this._renderRow(row, canMove));
      }
      this._tbody.replaceChildren(fragment);
      this._rowsSnapshot = snapshot;
      this._rowsKey = key;
    }

    for (const th of Array.from(this._table.tHead!.rows[0].cells)) {
      const key = th.dataset.column;
      if (COLUMNS.find(c => c.key === key)?.sort) {
        th.setAttribute(
          'aria-sort',
          key === this._sortKey
            ? this._sortDirection === 'asc'
              ? 'ascending'
              : 'descending'
            : 'none'
        );
      }
    }

    const shown = snapshot.rows.length;
    let summary: string;
    if (this._filter.trim()) {
      summary = `${filtered.length} of ${shown} rows match`;
    } else {
      summary = `${shown} ${shown === 1 ? 'row' : 'rows'}`;
    }
    if (snapshot.total_rows > shown) {
      summary += ` (the kernel has ${snapshot.total_rows}; the biggest ${shown} are listed)`;
    }
    this._summaryNode.textContent = summary;

    this._pagerNode.hidden = pages <= 1;
    this._pageText.textContent =
      sorted.length === 0 ? '' : `Rows ${start + 1}–${start + visible.length} of ${sorted.length}`;
    this._prevButton.disabled = this._page === 0;
    this._nextButton.disabled = this._page >= pages - 1;
  }

  private _renderRow(row: IRow, canMove: boolean): HTMLTableRowElement {
    const tr = el('tr', `${CLASS}-row`);
    tr.dataset.name = row.name;
    tr.dataset.device = row.device;
    tr.dataset.kind = row.kind;
    if (row.hidden) {
      tr.classList.add('jp-mod-hidden');
    }
    if (row.mixed) {
      tr.classList.add('jp-mod-mixed');
    }

    const name = el('td', `${CLASS}-cell-name`);
    const nameText = el('span', `${CLASS}-name`, row.name);
    name.append(nameText);
    if (row.hidden) {
      const badge = el('span', `${CLASS}-badge ${CLASS}-hiddenBadge`, 'history');
      badge.title = 'Only reachable through output history (Out / _N)';
      name.append(badge);
    }
    // Everything about the row, also for the columns a narrow sidebar hides.
    const details: string[] = [
      row.name,
      `${row.type} (${row.kind}) on ${rowDevice(row)}`,
      `${row.dtype ?? 'no dtype'}, shape ${formatShape(row.shape)}, ${formatBytes(row.bytes)}`
    ];
    if (row.note) {
      details.push(row.note);
    }
    if (row.shares_with.length > 0) {
      details.push(`shares memory with ${row.shares_with.join(', ')}`);
    }
    if (row.requires_grad) {
      details.push('requires grad');
    }
    name.title = details.join('\n');

    const type = el('td', `${CLASS}-cell-type`, row.type);
    type.title = row.kind;
    const device = el('td', `${CLASS}-cell-device`, rowDevice(row));
    const dtype = el('td', `${CLASS}-cell-dtype`, row.dtype ?? '—');
    const shape = el('td', `${CLASS}-cell-shape`, formatShape(row.shape));

    const size = el('td', `${CLASS}-cell-size`, formatBytes(row.bytes));
    const sizeTitle: string[] = [`${row.bytes} bytes`];
    if (row.would_need_bytes > row.bytes) {
      const needs = el('span', `${CLASS}-wouldNeed`, `needs ${formatBytes(row.would_need_bytes)}`);
      size.append(needs);
      sizeTitle.push(`would need ${formatBytes(row.would_need_bytes)} on a real device`);
    }
    if (row.grad_bytes > 0) {
      sizeTitle.push(`plus ${formatBytes(row.grad_bytes)} of .grad`);
    }
    size.title = sizeTitle.join('; ');

    const action = el('td', `${CLASS}-cell-action`);
    const target = this._target;
    if (target !== null && rowNeedsMove(row, target)) {
      // The kernel moves namespace names: a part of a container (`batch[0]`)
      // moves with its root (`batch`).
      const move = button(`${CLASS}-rowMove`, `→ ${target}`, `Move ${row.root} to ${target}`);
      move.dataset.name = row.root;
      move.dataset.device = target;
      if (row.root !== row.name) {
        move.title = `Moves all of ${row.root}`;
      }
      move.disabled = !canMove;
      action.append(move);
    } else if (!row.movable && row.note) {
      action.title = row.note;
    }

    tr.append(name, device, size, type, dtype, shape, action);
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
    if (this._sortKey === key) {
      this._sortDirection = this._sortDirection === 'asc' ? 'desc' : 'asc';
    } else {
      this._sortKey = key;
      this._sortDirection = FIRST_DIRECTION[key];
    }
    this._page = 0;
    this._renderRows();
  }

  private _connection: DeviceConnection | null = null;
  private _rowsSnapshot: ISnapshot | null = null;
  private _rowsKey: unknown[] = [];
  private _targets = new WeakMap<DeviceConnection, string | null>();
  private _target: string | null = null;
  private _picked = false;
  private _targetsKey = '';
  private _sortKey: SortKey = 'size';
  private _sortDirection: SortDirection = 'desc';
  private _filter = '';
  private _page = 0;

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
