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
 * search box keeps focus while deltas arrive. The table of rows is table.ts,
 * the banner and the per-device bars totals.ts. It sees the kernel through
 * IDeviceSource (tokens.ts) only.
 */

import { Widget } from '@lumino/widgets';

import { button, CLASS, drawAction, el } from './dom';
import { EnginesSection } from './engines';
import { IHeader, IWindowSpec } from './protocol';
import { RowsTable, SortKey } from './table';
import { TimelineChart } from './timeline';
import { drawTotals, drawWarnings } from './totals';
import type { ConnectionState, IDeviceSource } from './tokens';

export const PAGE_SIZE = 200;

export type { SortKey } from './table';

/** What the panel shows besides the connection's own states. */
export type PanelState = ConnectionState | 'no-notebook';

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

    this._contentNode.append(
      banner,
      this._totalsNode,
      toolbar,
      this._filterInput,
      this._rows.summaryNode,
      this._rows.tableNode,
      this._rows.pagerNode
    );

    this._statusNode.setAttribute('role', 'status');
    this._statusNode.setAttribute('aria-live', 'polite');

    this.node.append(
      header,
      this._noticeNode,
      this._busyNode,
      this._contentNode,
      this._timelineChart.node,
      this._engines.node,
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
    // the engines section only where the kernel has engines to gather from
    const engines = showView && Boolean(connection?.enginesReachable);
    this._engines.render(
      engines ? (connection?.engines ?? null) : null,
      Boolean(connection?.connected),
      engines
    );
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
      drawWarnings(this._bannerNode, view.header);
      drawTotals(this._totalsNode, view.header);
      this._renderTargets(view.header);
    }
    this._renderActions();
    this._renderRows();
    this._renderStatus();
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
    const view = connection?.view ?? null;
    const ready = connection?.state === 'ready' && view !== null && view.header.torch_imported;
    this._rows.render(ready ? view : null, this.target, this._waitReason());
  }

  /** The previous (-1) or next (+1) page of the window. */
  private _onPage(step: -1 | 1): void {
    const spec = this._connection?.spec;
    if (spec) {
      this._ask({ offset: Math.max(0, spec.offset + step * spec.limit) });
    }
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
  private _statusNode = el('div', `${CLASS}-status`);
  private _timelineChart = new TimelineChart();
  private _engines = new EnginesSection(expand => this._connection?.requestEngines(expand));
  private _rows = new RowsTable({
    sort: key => this._onSort(key),
    move: (device, name) => this._connection?.move(device, [name]),
    page: step => this._onPage(step)
  });
}
