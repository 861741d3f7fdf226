/**
 * Every row shows its device at every sidebar width: the Device column, or,
 * where a narrow sidebar hides that column, the chip by the name.
 *
 * What decides it is style/base.css (container queries on the panel); jsdom
 * lays nothing out, so this test reads the stylesheet and works out, for each
 * container width, which `display` wins for the Device column's cells and for
 * the chip (specificity, then source order, as the browser does). It refuses a
 * container condition it cannot read rather than guess. The Playwright test
 * (ui-tests/test_sidebar.py) checks the same in Chromium at 250 px.
 */
import * as fs from 'fs';
import * as path from 'path';

import { connectedPanel, IHarness, loadFixture } from './fakes';

const CSS = fs.readFileSync(path.resolve(__dirname, '..', '..', 'style', 'base.css'), 'utf-8');

const DEVICE_COLUMN = 'jp-TorchDevices-cell-device';
const DEVICE_CHIP = 'jp-TorchDevices-deviceChip';

interface IRule {
  selectors: string[];
  display: string | null;
  /** The container widths the rule applies at (always, outside a container query). */
  applies: (width: number) => boolean;
  order: number;
}

function condition(text: string): (width: number) => boolean {
  const parts = text.split(/\band\b/).map(part => part.trim());
  const tests = parts.map(part => {
    const found = /^\((max|min)-width:\s*(\d+)px\)$/.exec(part);
    if (!found) {
      throw new Error(`columns.test.ts cannot read the container condition "${part}"`);
    }
    const limit = Number(found[2]);
    return found[1] === 'max' ? (w: number) => w <= limit : (w: number) => w >= limit;
  });
  return width => tests.every(test => test(width));
}

/** The rules of a stylesheet, flattened, with the container condition each sits in. */
function parseRules(css: string): IRule[] {
  const text = css.replace(/\/\*[\s\S]*?\*\//g, '');
  const rules: IRule[] = [];
  const always = (): boolean => true;
  let applies: (width: number) => boolean = always;
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '{') {
      const prelude = text.slice(start, i).trim();
      if (prelude.startsWith('@container')) {
        applies = condition(prelude.replace(/^@container\s*/, ''));
        depth += 1;
        start = i + 1;
        continue;
      }
      const end = text.indexOf('}', i);
      const body = text.slice(i + 1, end);
      const display = /(?:^|;)\s*display:\s*([^;!]+)/.exec(body);
      rules.push({
        selectors: prelude.split(',').map(s => s.trim()),
        display: display ? display[1].trim() : null,
        applies: depth > 0 ? applies : always,
        order: rules.length
      });
      i = end;
      start = end + 1;
    } else if (text[i] === '}') {
      depth -= 1;
      applies = always;
      start = i + 1;
    }
  }
  return rules;
}

function specificity(selector: string): number {
  const ids = (selector.match(/#[\w-]+/g) ?? []).length;
  const classes = (selector.match(/\.[\w-]+|\[[^\]]+\]|:(?!:)[\w-]+/g) ?? []).length;
  const types = (selector.replace(/[.#[:][\w-]+(\])?/g, ' ').match(/\b[a-z][\w-]*/g) ?? []).length;
  return ids * 10000 + classes * 100 + types;
}

/** The `display` that wins for an element of `className` at a container `width`. */
function displayOf(rules: IRule[], className: string, width: number): string {
  let best: { weight: number; order: number; display: string } | null = null;
  for (const rule of rules) {
    if (rule.display === null || !rule.applies(width)) {
      continue;
    }
    for (const selector of rule.selectors) {
      const last = selector.split(/\s+|>/).pop() ?? '';
      // ignore state selectors ([hidden], :hover): they are not about the width
      if (!last.split('.').includes(className) || /\[|:/.test(last)) {
        continue;
      }
      const weight = specificity(selector);
      if (!best || weight > best.weight || (weight === best.weight && rule.order > best.order)) {
        best = { weight, order: rule.order, display: rule.display };
      }
    }
  }
  return best?.display ?? 'shown';
}

const WIDTHS = Array.from({ length: 1400 }, (_, i) => 120 + i);

describe('the device shows at every width', () => {
  const rules = parseRules(CSS);

  it('the stylesheet shows the Device column or the chip, exactly one, at each width', () => {
    const wrong: string[] = [];
    for (const width of WIDTHS) {
      const column = displayOf(rules, DEVICE_COLUMN, width) !== 'none';
      const chip = displayOf(rules, DEVICE_CHIP, width) !== 'none';
      if (column === chip) {
        wrong.push(
          `${width}px: column ${column ? 'shown' : 'hidden'}, chip ${chip ? 'shown' : 'hidden'}`
        );
      }
    }
    expect(wrong).toEqual([]);
  });

  it('reads the narrow-sidebar rules it decides from', () => {
    // the default sidebar (250 px wide, 226 px inside its padding): the chip
    expect(displayOf(rules, DEVICE_COLUMN, 226)).toBe('none');
    expect(displayOf(rules, DEVICE_CHIP, 226)).toBe('inline-block');
    // a wide sidebar: the column, the chip hidden
    expect(displayOf(rules, DEVICE_COLUMN, 600)).toBe('shown');
    expect(displayOf(rules, DEVICE_CHIP, 600)).toBe('none');
    expect(() => condition('(orientation: portrait)')).toThrow(/cannot read/);
  });

  it('every row carries its device in both places, as the kernel names it', async () => {
    let harness: IHarness | null = null;
    try {
      harness = await connectedPanel(loadFixture('mixed'));
      const rows = Array.from(
        harness.panel.node.querySelectorAll<HTMLTableRowElement>('tr.jp-TorchDevices-row')
      );
      expect(rows.length).toBeGreaterThan(0);
      for (const tr of rows) {
        const device = tr.dataset.device!;
        expect(tr.querySelector(`.${DEVICE_COLUMN}`)!.textContent).toBe(device);
        const chip = tr.querySelector<HTMLElement>(`td.jp-TorchDevices-cell-name .${DEVICE_CHIP}`)!;
        expect(chip.textContent).toBe(device);
      }
    } finally {
      harness?.panel.dispose();
      harness?.connection.dispose();
      document.body.innerHTML = '';
    }
  });
});
