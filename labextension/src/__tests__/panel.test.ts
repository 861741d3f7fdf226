/**
 * The panel over each fixture snapshot: what it shows, how it sorts and
 * filters, and what its buttons put on the comm.
 */
import { formatBytes, formatShape } from '../format';
import { DevicePanel, PAGE_SIZE, rowNeedsMove } from '../panel';
import { PROTOCOL_NAME, PROTOCOL_VERSION } from '../protocol';
import type { IRow, ISnapshot } from '../protocol';
import { connectedPanel, fixtureNames, flush, IHarness, loadFixture, q, rowNames } from './fakes';

let harness: IHarness | null = null;

async function show(snapshot: ISnapshot): Promise<IHarness> {
  harness = await connectedPanel(snapshot);
  return harness;
}

afterEach(() => {
  harness?.panel.dispose();
  harness?.connection.dispose();
  harness = null;
  document.body.innerHTML = '';
});

// The kernel's own order: biggest (or, on meta, would-be biggest) first, then by name.
const size = (r: IRow): number => Math.max(r.bytes, r.would_need_bytes);
const bySizeDesc = (rows: IRow[]): string[] =>
  [...rows]
    .sort((a, b) => size(b) - size(a) || b.bytes - a.bytes || a.name.localeCompare(b.name))
    .map(r => r.name);

function click(node: Element): void {
  node.dispatchEvent(new MouseEvent('click', { bubbles: true }));
}

function lastRequest(h: IHarness): Record<string, unknown> {
  const requests = h.comm.requests;
  return requests[requests.length - 1];
}

function selectTarget(panel: DevicePanel, device: string): void {
  const select = q<HTMLSelectElement>(panel.node, 'select.jp-TorchDevices-target');
  select.value = device;
  select.dispatchEvent(new Event('change'));
}

describe.each(fixtureNames())('%s', name => {
  const snapshot = loadFixture(name);

  it('renders totals, rows, banner and targets from the snapshot', async () => {
    const { panel } = await show(snapshot);
    const node = panel.node;
    expect(node.dataset.state).toBe('ready');

    if (!snapshot.torch_imported) {
      expect(q(node, '.jp-TorchDevices-noticeText').textContent).toBe(
        'torch is not imported in this kernel yet.'
      );
      expect(q(node, '.jp-TorchDevices-notice').hidden).toBe(false);
      expect(q(node, '.jp-TorchDevices-content').hidden).toBe(true);
      expect(node.querySelectorAll('tbody tr')).toHaveLength(0);
      return;
    }
    expect(q(node, '.jp-TorchDevices-notice').hidden).toBe(true);
    expect(q(node, '.jp-TorchDevices-content').hidden).toBe(false);

    // Totals: one per device, in the kernel's order, with sizes and meta.
    const totals = Array.from(node.querySelectorAll<HTMLElement>('.jp-TorchDevices-total'));
    expect(totals.map(t => t.dataset.device)).toEqual(snapshot.devices.map(d => d.device));
    snapshot.devices.forEach((device, i) => {
      const total = totals[i];
      expect(q(total, '.jp-TorchDevices-totalSize').textContent).toBe(formatBytes(device.bytes));
      const meta = q(total, '.jp-TorchDevices-totalMeta').textContent ?? '';
      if (device.would_need_bytes > device.bytes) {
        expect(meta).toContain(`would need ${formatBytes(device.would_need_bytes)}`);
      }
      if (device.capacity !== null) {
        expect(meta).toContain(`of ${formatBytes(device.capacity)}`);
        const width = parseFloat(q(total, '.jp-TorchDevices-barFill').style.width);
        expect(width).toBeCloseTo((100 * device.bytes) / device.capacity, 1);
      }
      if (device.allocated !== null) {
        expect(meta).toContain(`allocated ${formatBytes(device.allocated)}`);
      }
      if (device.reserved !== null) {
        expect(meta).toContain(`reserved ${formatBytes(device.reserved)}`);
      }
    });

    // Rows: every row, biggest first, with its cells.
    expect(rowNames(panel)).toEqual(bySizeDesc(snapshot.rows).slice(0, PAGE_SIZE));
    for (const row of snapshot.rows) {
      const tr = q(node, `tr.jp-TorchDevices-row[data-name="${row.name}"]`);
      expect(q(tr, '.jp-TorchDevices-name').textContent).toBe(row.name);
      expect(q(tr, 'td.jp-TorchDevices-cell-type').textContent).toBe(row.type);
      const deviceText = q(tr, 'td.jp-TorchDevices-cell-device').textContent;
      if (row.mixed) {
        for (const d of row.devices) {
          expect(deviceText).toContain(d);
        }
      } else {
        expect(deviceText).toBe(row.device);
      }
      expect(q(tr, 'td.jp-TorchDevices-cell-dtype').textContent).toBe(row.dtype ?? '—');
      expect(q(tr, 'td.jp-TorchDevices-cell-shape').textContent).toBe(formatShape(row.shape));
      expect(q(tr, 'td.jp-TorchDevices-cell-size').textContent).toContain(formatBytes(row.bytes));
      expect(tr.classList.contains('jp-mod-hidden')).toBe(row.hidden);
      expect(tr.querySelector('.jp-TorchDevices-hiddenBadge') !== null).toBe(row.hidden);
    }

    // Banner iff warnings.
    const banner = q(node, '.jp-TorchDevices-banner');
    expect(banner.hidden).toBe(snapshot.warnings.length === 0);
    for (const warning of snapshot.warnings) {
      expect(banner.textContent).toContain(warning);
    }

    // Targets: all listed; disabled ones say why and cannot be chosen.
    const select = q<HTMLSelectElement>(node, 'select.jp-TorchDevices-target');
    const options = Array.from(select.options);
    expect(options.map(o => o.value)).toEqual(snapshot.targets.map(t => t.device));
    snapshot.targets.forEach((target, i) => {
      expect(options[i].disabled).toBe(!target.enabled);
      if (!target.enabled) {
        expect(options[i].title).toBe(target.reason);
      }
    });
    const chosen = snapshot.targets.find(t => t.enabled && t.device === snapshot.default_target)
      ? snapshot.default_target
      : snapshot.targets.find(t => t.enabled)?.device;
    expect(select.value).toBe(chosen);
    expect(options.find(o => o.value === select.value)?.disabled).toBe(false);

    // Move all follows the select; Undo follows can_undo.
    const moveAll = q<HTMLButtonElement>(node, 'button.jp-TorchDevices-moveAll');
    expect(moveAll.textContent).toBe(`Move all to ${chosen}`);
    expect(q<HTMLButtonElement>(node, 'button.jp-TorchDevices-undo').disabled).toBe(
      !snapshot.can_undo
    );

    // Per-row buttons exactly where a move would do something.
    for (const row of snapshot.rows) {
      const tr = q(node, `tr.jp-TorchDevices-row[data-name="${row.name}"]`);
      const button = tr.querySelector<HTMLButtonElement>('button.jp-TorchDevices-rowMove');
      expect(button !== null).toBe(rowNeedsMove(row, chosen ?? null));
      if (button) {
        expect(button.textContent).toBe(`→ ${chosen}`);
      }
    }
  });

  it('labels every control for assistive technology', async () => {
    const { panel } = await show(snapshot);
    for (const control of Array.from(panel.node.querySelectorAll('button, select, input'))) {
      expect(control.getAttribute('aria-label')).toBeTruthy();
    }
    const headers = Array.from(panel.node.querySelectorAll('thead th'));
    expect(headers.length).toBe(7);
    for (const th of headers) {
      expect(th.getAttribute('scope')).toBe('col');
    }
    const status = q(panel.node, '.jp-TorchDevices-status');
    expect(status.getAttribute('role')).toBe('status');
    expect(status.getAttribute('aria-live')).toBe('polite');
  });
});

describe('sorting', () => {
  it('sorts by size (desc) first, then by clicked headers', async () => {
    const snapshot = loadFixture('basic');
    const { panel } = await show(snapshot);
    const names = snapshot.rows.map(r => r.name);
    const th = (column: string): HTMLElement => q(panel.node, `th[data-column="${column}"]`);

    expect(rowNames(panel)).toEqual(bySizeDesc(snapshot.rows));
    expect(th('size').getAttribute('aria-sort')).toBe('descending');

    click(q(th('name'), 'button'));
    const ascending = [...names].sort((a, b) => a.localeCompare(b));
    expect(rowNames(panel)).toEqual(ascending);
    expect(th('name').getAttribute('aria-sort')).toBe('ascending');
    expect(th('size').getAttribute('aria-sort')).toBe('none');

    click(q(th('name'), 'button'));
    expect(rowNames(panel)).toEqual([...ascending].reverse());
    expect(th('name').getAttribute('aria-sort')).toBe('descending');

    click(q(th('size'), 'button'));
    expect(rowNames(panel)).toEqual(bySizeDesc(snapshot.rows));
    click(q(th('size'), 'button'));
    expect(rowNames(panel)).toEqual(bySizeDesc(snapshot.rows).reverse());
  });

  it('sorts by device, biggest first within a device', async () => {
    const snapshot = loadFixture('cuda');
    const { panel } = await show(snapshot);
    click(q(panel.node, 'th[data-column="device"] button'));
    const devices = Array.from(
      panel.node.querySelectorAll<HTMLElement>('td.jp-TorchDevices-cell-device')
    ).map(td => td.textContent ?? '');
    expect(devices).toEqual([...devices].sort((a, b) => a.localeCompare(b)));
    const expected = [...snapshot.rows]
      .sort((a, b) => a.device.localeCompare(b.device) || size(b) - size(a))
      .map(r => r.name);
    expect(rowNames(panel)).toEqual(expected);
  });
});

describe('filtering', () => {
  function filter(panel: DevicePanel, text: string): void {
    const input = q<HTMLInputElement>(panel.node, 'input.jp-TorchDevices-filter');
    input.value = text;
    input.dispatchEvent(new Event('input'));
  }

  it('matches name, type or device, case-insensitively', async () => {
    const snapshot = loadFixture('cuda');
    const { panel } = await show(snapshot);
    const matching = (word: string): string[] =>
      bySizeDesc(
        snapshot.rows.filter(r =>
          [r.name, r.type, r.device, ...r.devices].some(s =>
            s.toLowerCase().includes(word.toLowerCase())
          )
        )
      );

    filter(panel, 'CPU');
    expect(rowNames(panel)).toEqual(matching('cpu'));
    expect(rowNames(panel).length).toBeGreaterThan(0);

    filter(panel, 'adam');
    expect(rowNames(panel)).toEqual(matching('adam'));

    filter(panel, snapshot.rows[0].name);
    expect(rowNames(panel)).toContain(snapshot.rows[0].name);

    filter(panel, 'no-such-thing');
    expect(rowNames(panel)).toEqual([]);
    expect(q(panel.node, '.jp-TorchDevices-summary').textContent).toContain('0 of');

    filter(panel, '');
    expect(rowNames(panel)).toHaveLength(snapshot.rows.length);
  });

  it('keeps the filter box (and its focus) across snapshots', async () => {
    const snapshot = loadFixture('basic');
    const h = await show(snapshot);
    const input = q<HTMLInputElement>(h.panel.node, 'input.jp-TorchDevices-filter');
    input.focus();
    filter(h.panel, 'x');
    h.comm.receive({ ...snapshot, seq: snapshot.seq + 1 });
    expect(q(h.panel.node, 'input.jp-TorchDevices-filter')).toBe(input);
    expect(document.activeElement).toBe(input);
    const shown = rowNames(h.panel);
    expect(shown.length).toBeGreaterThan(0);
    for (const name of shown) {
      const row = snapshot.rows.find(r => r.name === name)!;
      expect(`${row.name} ${row.type} ${row.devices.join(' ')}`.toLowerCase()).toContain('x');
    }
  });
});

describe('paging', () => {
  it('shows at most PAGE_SIZE rows at a time', async () => {
    const base = loadFixture('basic');
    const template = base.rows[0];
    const rows: IRow[] = Array.from({ length: 450 }, (_, i) => ({
      ...template,
      name: `t${i}`,
      root: `t${i}`,
      bytes: 1000 + i
    }));
    const { panel } = await show({ ...base, rows, total_rows: 1200 });
    expect(rowNames(panel)).toHaveLength(PAGE_SIZE);
    expect(rowNames(panel)[0]).toBe('t449');
    const summary = q(panel.node, '.jp-TorchDevices-summary').textContent;
    expect(summary).toContain('1200');
    const pager = q(panel.node, '.jp-TorchDevices-pager');
    expect(pager.hidden).toBe(false);
    const next = q<HTMLButtonElement>(pager, 'button.jp-TorchDevices-next');
    const prev = q<HTMLButtonElement>(pager, 'button.jp-TorchDevices-prev');
    expect(prev.disabled).toBe(true);
    click(next);
    expect(rowNames(panel)).toHaveLength(PAGE_SIZE);
    expect(rowNames(panel)[0]).toBe(`t${449 - PAGE_SIZE}`);
    click(next);
    expect(rowNames(panel)).toHaveLength(450 - 2 * PAGE_SIZE);
    expect(next.disabled).toBe(true);
    click(prev);
    expect(rowNames(panel)).toHaveLength(PAGE_SIZE);
  });
});

describe('requests from the buttons', () => {
  function expectRequest(
    request: Record<string, unknown>,
    type: string,
    extra: Record<string, unknown> = {}
  ): void {
    expect(request).toMatchObject({ protocol: PROTOCOL_NAME, version: PROTOCOL_VERSION, type });
    expect(typeof request.request_id).toBe('string');
    expect((request.request_id as string).length).toBeGreaterThan(0);
    expect(request).toMatchObject(extra);
    const allowed = ['protocol', 'version', 'type', 'request_id'];
    if (type === 'move') {
      allowed.push('device', 'names');
    }
    expect(Object.keys(request).sort()).toEqual(allowed.sort());
  }

  it('opens the comm with a refresh request', async () => {
    const h = await show(loadFixture('basic'));
    expect(h.comm.opened).toHaveLength(1);
    expectRequest(h.comm.opened[0] as Record<string, unknown>, 'refresh');
  });

  it('Move all sends a move of everything to the chosen target', async () => {
    const snapshot = loadFixture('cuda');
    const h = await show(snapshot);
    const moveAll = q<HTMLButtonElement>(h.panel.node, 'button.jp-TorchDevices-moveAll');
    expect(moveAll.disabled).toBe(false);
    click(moveAll);
    expectRequest(lastRequest(h), 'move', { device: snapshot.default_target, names: null });
    // While the move is pending the buttons wait.
    expect(moveAll.disabled).toBe(true);
    expect(q(h.panel.node, '.jp-TorchDevices-status').textContent).toContain('Moving');
  });

  it('the select changes the target of Move all and of the row buttons', async () => {
    // A fixture with a second enabled target that some movable row is not on yet.
    const hasWork = (s: ISnapshot, device: string): boolean =>
      s.rows.some(r => r.movable && (r.mixed || r.device !== device));
    const snapshot = fixtureNames()
      .map(loadFixture)
      .find(s =>
        s.targets.some(t => t.enabled && t.device !== s.default_target && hasWork(s, t.device))
      )!;
    const h = await show(snapshot);
    const other = snapshot.targets.find(
      t => t.enabled && t.device !== h.panel.target && hasWork(snapshot, t.device)
    )!.device;
    selectTarget(h.panel, other);
    expect(h.panel.target).toBe(other);
    const moveAll = q<HTMLButtonElement>(h.panel.node, 'button.jp-TorchDevices-moveAll');
    expect(moveAll.textContent).toBe(`Move all to ${other}`);
    expect(moveAll.getAttribute('aria-label')).toBe(`Move all to ${other}`);
    const movable = snapshot.rows.filter(r => r.movable && (r.mixed || r.device !== other));
    expect(movable.length).toBeGreaterThan(0);
    const buttons = Array.from(
      h.panel.node.querySelectorAll<HTMLButtonElement>('button.jp-TorchDevices-rowMove')
    );
    expect(buttons.map(b => b.dataset.name).sort()).toEqual(movable.map(r => r.root).sort());
    expect(buttons.every(b => b.textContent === `→ ${other}`)).toBe(true);
    expect(buttons.every(b => !b.disabled)).toBe(true);

    const row = movable[0];
    click(q(h.panel.node, `tr[data-name="${row.name}"] button.jp-TorchDevices-rowMove`));
    expectRequest(lastRequest(h), 'move', { device: other, names: [row.root] });
  });

  it('Move all is disabled when everything is already on the target', async () => {
    const snapshot = loadFixture('basic');
    const target = snapshot.default_target!;
    const rows = snapshot.rows.map(r => ({
      ...r,
      device: target,
      devices: [target],
      mixed: false
    }));
    const h = await show({ ...snapshot, rows, total_rows: rows.length });
    const moveAll = q<HTMLButtonElement>(h.panel.node, 'button.jp-TorchDevices-moveAll');
    expect(moveAll.disabled).toBe(true);
    expect(h.panel.node.querySelectorAll('button.jp-TorchDevices-rowMove')).toHaveLength(0);
  });

  it('a part of a container moves its root (the kernel moves names)', async () => {
    const snapshot = loadFixture('cuda');
    const template = snapshot.rows.find(r => r.movable && r.device !== snapshot.default_target)!;
    const part = { ...template, name: `${template.root}[0]`, root: template.root };
    const h = await show({ ...snapshot, rows: [...snapshot.rows, part], total_rows: 6 });
    const button = q<HTMLButtonElement>(
      h.panel.node,
      `tr[data-name="${part.name}"] button.jp-TorchDevices-rowMove`
    );
    expect(button.getAttribute('aria-label')).toBe(
      `Move ${part.root} to ${snapshot.default_target}`
    );
    click(button);
    expectRequest(lastRequest(h), 'move', {
      device: snapshot.default_target,
      names: [part.root]
    });
  });

  it('a disabled target cannot be chosen', async () => {
    const snapshot = loadFixture('mixed');
    const h = await show(snapshot);
    const disabled = snapshot.targets.find(t => !t.enabled)!;
    selectTarget(h.panel, disabled.device);
    // jsdom, like browsers, refuses to select a disabled option.
    expect(h.panel.target).not.toBe(disabled.device);
    click(q(h.panel.node, 'button.jp-TorchDevices-moveAll'));
    expect(lastRequest(h).device).not.toBe(disabled.device);
  });

  it('Undo is enabled iff can_undo and sends an undo', async () => {
    const basic = loadFixture('basic');
    const h = await show({ ...basic, can_undo: false });
    const undo = q<HTMLButtonElement>(h.panel.node, 'button.jp-TorchDevices-undo');
    expect(undo.disabled).toBe(true);
    h.comm.receive({ ...basic, seq: basic.seq + 1, can_undo: true });
    expect(undo.disabled).toBe(false);
    click(undo);
    expectRequest(lastRequest(h), 'undo');
  });

  it('Refresh sends a refresh', async () => {
    const h = await show(loadFixture('basic'));
    const count = h.comm.requests.length;
    click(q(h.panel.node, 'button.jp-TorchDevices-refresh'));
    expect(h.comm.requests).toHaveLength(count + 1);
    expectRequest(lastRequest(h), 'refresh');
  });

  it('request ids are unique', async () => {
    const h = await show({ ...loadFixture('mixed'), can_undo: true });
    click(q(h.panel.node, 'button.jp-TorchDevices-refresh'));
    click(q(h.panel.node, 'button.jp-TorchDevices-undo'));
    const ids = h.comm.requests.map(r => r.request_id);
    expect(new Set(ids).size).toBe(ids.length);
  });
});

describe('stable rows', () => {
  it('a status or busy change keeps the row buttons (a click in progress survives)', async () => {
    const snapshot = loadFixture('cuda');
    const h = await show(snapshot);
    const before = h.panel.node.querySelector('button.jp-TorchDevices-rowMove');
    expect(before).not.toBeNull();
    click(q(h.panel.node, 'button.jp-TorchDevices-refresh'));
    h.comm.receive({
      protocol: PROTOCOL_NAME,
      version: 1,
      type: 'reply',
      request_id: lastRequest(h).request_id,
      ok: false,
      message: 'something went wrong',
      outcome: null
    });
    h.session.setStatus('busy');
    expect(h.panel.node.querySelector('button.jp-TorchDevices-rowMove')).toBe(before);
    expect((before as HTMLButtonElement).disabled).toBe(true);
    h.session.setStatus('idle');
    expect(h.panel.node.querySelector('button.jp-TorchDevices-rowMove')).toBe(before);
    expect((before as HTMLButtonElement).disabled).toBe(false);
    // A new snapshot redraws.
    h.comm.receive({ ...snapshot, seq: snapshot.seq + 1 });
    expect(h.panel.node.querySelector('button.jp-TorchDevices-rowMove')).not.toBe(before);
  });
});

describe('the status line', () => {
  it('shows the reply to a move, errors as errors, never a traceback', async () => {
    const snapshot = loadFixture('cuda');
    const h = await show(snapshot);
    click(q(h.panel.node, 'button.jp-TorchDevices-moveAll'));
    const id = lastRequest(h).request_id;
    h.comm.receive({
      protocol: PROTOCOL_NAME,
      version: 1,
      type: 'reply',
      request_id: id,
      ok: false,
      message:
        'Traceback (most recent call last):\n  File "<x>", line 1\nRuntimeError: will not fit on cuda:0 (needs 2.0 GiB, 1.0 GiB free)',
      outcome: null
    });
    const status = q(h.panel.node, '.jp-TorchDevices-status');
    expect(status.textContent).toBe(
      'RuntimeError: will not fit on cuda:0 (needs 2.0 GiB, 1.0 GiB free)'
    );
    expect(status.classList.contains('jp-mod-error')).toBe(true);
    // The buttons are usable again.
    expect(q<HTMLButtonElement>(h.panel.node, 'button.jp-TorchDevices-moveAll').disabled).toBe(
      false
    );

    click(q(h.panel.node, 'button.jp-TorchDevices-moveAll'));
    h.comm.receive({
      protocol: PROTOCOL_NAME,
      version: 1,
      type: 'reply',
      request_id: lastRequest(h).request_id,
      ok: true,
      message: 'moved 3 objects to cpu',
      outcome: { action: 'move', ok: true, message: 'moved 3 objects to cpu' }
    });
    expect(status.textContent).toBe('moved 3 objects to cpu');
    expect(status.classList.contains('jp-mod-error')).toBe(false);
    expect(status.classList.contains('jp-mod-ok')).toBe(true);
  });

  it("shows a snapshot's last_action done elsewhere", async () => {
    const snapshot = loadFixture('basic');
    const h = await show(snapshot);
    h.comm.receive({
      ...snapshot,
      seq: snapshot.seq + 1,
      can_undo: true,
      last_action: { action: 'move', ok: true, message: 'moved x to meta' }
    });
    expect(q(h.panel.node, '.jp-TorchDevices-status').textContent).toBe('moved x to meta');
  });

  it('a failed undo stays on the status line when the next snapshot arrives', async () => {
    const snapshot = loadFixture('cuda');
    const moved = {
      action: 'move' as const,
      ok: true,
      message: 'Moved 1 object (1.0 MiB) to cuda:0'
    };
    const h = await show({ ...snapshot, can_undo: true, last_action: moved });
    click(q(h.panel.node, 'button.jp-TorchDevices-undo'));
    const id = lastRequest(h).request_id;
    const failed = { action: 'undo' as const, ok: false, message: 'cannot undo a move to meta' };
    h.comm.receive({
      protocol: PROTOCOL_NAME,
      version: 1,
      type: 'reply',
      request_id: id,
      ok: false,
      message: failed.message,
      outcome: failed
    });
    // The kernel pushes a snapshot whose last_action is still the move.
    h.comm.receive({ ...snapshot, seq: snapshot.seq + 1, can_undo: true, last_action: moved });
    const status = q(h.panel.node, '.jp-TorchDevices-status');
    expect(status.textContent).toBe(failed.message);
    expect(status.classList.contains('jp-mod-error')).toBe(true);
  });

  it('says so when a snapshot cannot be read', async () => {
    const snapshot = loadFixture('basic');
    const h = await show(snapshot);
    h.comm.receive({ ...snapshot, seq: 99, version: 2 });
    const status = q(h.panel.node, '.jp-TorchDevices-status');
    expect(status.classList.contains('jp-mod-error')).toBe(true);
    expect(status.textContent).toContain('version 2');
    // The last good snapshot stays.
    expect(rowNames(h.panel)).toHaveLength(snapshot.rows.length);
  });

  it('ignores a snapshot older than the one shown', async () => {
    const snapshot = loadFixture('basic');
    const h = await show(snapshot);
    h.comm.receive({ ...snapshot, seq: snapshot.seq - 1, rows: [] });
    expect(rowNames(h.panel)).toHaveLength(snapshot.rows.length);
  });
});

describe('the target follows the kernel until the user picks one', () => {
  it('follows a new default_target, then keeps the user pick', async () => {
    const base = loadFixture('basic');
    const targets = base.targets.map(t => ({ ...t, enabled: t.device === 'cpu' || t.enabled }));
    const first: ISnapshot = { ...base, seq: 1, targets, default_target: 'cpu' };
    const h = await show(first);
    expect(h.panel.target).toBe('cpu');

    // e.g. %config TorchDeviceMagic.allow_meta_target = True: the kernel's default moves
    h.comm.receive({ ...first, seq: 2, default_target: 'meta' });
    await flush();
    expect(h.panel.target).toBe('meta');

    selectTarget(h.panel, 'cpu');
    h.comm.receive({ ...first, seq: 3, default_target: 'meta' });
    await flush();
    expect(h.panel.target).toBe('cpu'); // the user's pick stays while it is available
  });
});
