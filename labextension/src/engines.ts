/**
 * The engines section: every ipyparallel engine of the kernel's client, one
 * row per engine and device (rank, host, objects, size, the accelerator's
 * used / total), the engines that did not answer in time, and one engine's
 * objects when expanded. It draws the kernel's `engines` message
 * (shell/gather.py, protocol.py) and decides nothing: every size is the
 * kernel's text. Nothing is gathered until the user asks (the Gather button,
 * an expand), so a sidebar costs the engines nothing by itself.
 */

import { button, CLASS, el } from './dom';
import type { IEngine, IEnginesMessage } from './protocol';

const SECTION = `${CLASS}-engines`;

/** What the section asks for: every engine's summary and, unless null, one engine's objects. */
export type AskEngines = (expand: number | null) => void;

export class EnginesSection {
  constructor(ask: AskEngines) {
    this._ask = ask;
    this.node.setAttribute('aria-label', 'ipyparallel engines');
    const title = el('div', `${SECTION}-title`);
    title.append(el('h3', `${SECTION}-heading`, 'Engines'), this._gatherButton);
    // the table scrolls sideways inside the sidebar; the columns a user reads first
    // (engine, device, size) come first so they show at the sidebar's usual width
    const scroll = el('div', `${SECTION}-scroll`);
    scroll.append(this._tableNode);
    this.node.append(title, this._noteNode, scroll, this._missingNode);
    this._gatherButton.addEventListener('click', () => this._ask(this._expanded));
  }

  readonly node = el('section', SECTION);

  /** The engine whose objects are shown, or null. */
  get expanded(): number | null {
    return this._expanded;
  }

  /**
   * Draw `message` (null: nothing gathered yet). `connected`: requests can be
   * sent; `visible`: the kernel's view is shown at all.
   */
  render(message: IEnginesMessage | null, connected: boolean, visible: boolean): void {
    this.node.hidden = !visible;
    this._gatherButton.disabled = !connected;
    this._gatherButton.textContent = message?.available ? 'Refresh' : 'Gather';
    this._tableNode.replaceChildren();
    this._missingNode.replaceChildren();
    if (message === null) {
      this._noteNode.textContent =
        "Every ipyparallel engine of this kernel's client: Gather asks each for a summary.";
      return;
    }
    if (!message.available) {
      this._noteNode.textContent = message.message;
      return;
    }
    this._expanded = message.expanded;
    const ms = Math.round(message.seconds * 1000);
    const count = message.engines.length;
    this._noteNode.textContent = `${count} engine${count === 1 ? '' : 's'} answered in ${ms} ms`;
    const head = el('tr');
    for (const name of [
      '',
      'engine',
      'device',
      'size',
      'objects',
      'used / total',
      'rank',
      'host'
    ]) {
      head.append(el('th', undefined, name));
    }
    const body = el('tbody');
    for (const engine of message.engines) {
      this._engineRows(body, engine);
    }
    const thead = el('thead');
    thead.append(head);
    this._tableNode.append(thead, body);
    for (const missing of message.missing) {
      this._missingNode.append(
        el('li', `${SECTION}-missing`, `engine ${missing.engine}: ${missing.reason}`)
      );
    }
  }

  private _engineRows(body: HTMLElement, engine: IEngine): void {
    const open = engine.objects !== null;
    const devices = engine.devices.length > 0 ? engine.devices : [null];
    devices.forEach((device, index) => {
      const row = el('tr', `${SECTION}-row`);
      row.dataset.engine = String(engine.engine);
      const toggle = el('td');
      if (index === 0) {
        const label = open ? '▾' : '▸';
        const what = open ? 'Hide' : 'Show';
        const node = button(
          `${SECTION}-expand`,
          label,
          `${what} engine ${engine.engine}'s objects`
        );
        node.addEventListener('click', () => this._ask(open ? null : engine.engine));
        toggle.append(node);
      }
      row.append(
        toggle,
        el('td', undefined, index === 0 ? String(engine.engine) : ''),
        el('td', undefined, device?.device ?? '-'),
        el('td', undefined, device?.size ?? ''),
        el('td', undefined, device ? String(device.objects) : '0'),
        el('td', undefined, device?.memory ?? ''),
        el('td', undefined, index === 0 && engine.rank !== null ? String(engine.rank) : ''),
        el('td', undefined, index === 0 ? engine.host : '')
      );
      if (index === 0 && engine.status) {
        row.title = engine.status;
      }
      body.append(row);
    });
    for (const item of engine.objects ?? []) {
      const row = el('tr', `${SECTION}-object`);
      row.dataset.engine = String(engine.engine);
      // under the engine's own columns: the name where the engine is, then device, size
      // and the object's type where the engine row counts its objects
      const type = el('td', undefined, item.type);
      type.colSpan = 4;
      row.append(
        el('td'),
        el('td', undefined, item.name),
        el('td', undefined, item.device),
        el('td', undefined, item.size),
        type
      );
      body.append(row);
    }
  }

  private _ask: AskEngines;
  private _expanded: number | null = null;
  private _gatherButton = button(`${SECTION}-gather`, 'Gather', "Gather every engine's devices");
  private _noteNode = el('p', `${SECTION}-note`);
  private _tableNode = el('table', `${SECTION}-table`);
  private _missingNode = el('ul', `${SECTION}-missingList`);
}
