/**
 * One byte format: every size the sidebar shows is the text the kernel's view
 * model wrote (units.py's format_bytes). No TypeScript source formats bytes,
 * and the panel shows the kernel's text even where a formatter of its own
 * would round the other way.
 */
import * as fs from 'fs';
import * as path from 'path';

import type { IViewMessage } from '../protocol';
import { connectedPanel, IHarness, q, withView } from './fakes';

const SRC = path.resolve(__dirname, '..');

/** What a byte formatter in TypeScript would need: a unit name or the 1024 step. */
const FORMATTING = [/[KMGTP]iB/, /\b1024\b/, /\b[kMGT]B\b/, /Math\.log2?\(/];

describe('no byte formatter in TypeScript', () => {
  it('no source file writes a unit or steps by 1024', () => {
    const sources = fs.readdirSync(SRC).filter(name => name.endsWith('.ts'));
    expect(sources).toContain('panel.ts');
    const found: string[] = [];
    for (const name of sources) {
      const text = fs.readFileSync(path.join(SRC, name), 'utf-8');
      for (const pattern of FORMATTING) {
        if (pattern.test(text)) {
          found.push(`${name}: ${pattern}`);
        }
      }
    }
    expect(found).toEqual([]);
  });
});

let harness: IHarness | null = null;

afterEach(() => {
  harness?.panel.dispose();
  harness?.connection.dispose();
  harness = null;
  document.body.innerHTML = '';
});

describe("the panel shows the kernel's size text", () => {
  it('1,280 B reads 1.2 KiB (as format_bytes writes it), in rows and bars', async () => {
    const view: IViewMessage = withView('basic', v => {
      const row = v.window.rows[0];
      row.size_bytes = 1280;
      row.size = '1.2 KiB';
      row.grad_bytes = 1280;
      row.grad = '+1.2 KiB grad';
      v.header.bars[0].bytes = 1280;
      v.header.bars[0].text = '1.2 KiB';
    });
    harness = await connectedPanel(view);
    const name = view.window.rows[0].name;
    const row = q(harness.panel.node, `tr[data-name="${name}"]`);
    expect(q(row, '.jp-TorchDevices-cell-size').textContent).toBe('1.2 KiB');
    expect(q(row, '.jp-TorchDevices-cell-grad').textContent).toBe('+1.2 KiB grad');
    const bar = q(harness.panel.node, '.jp-TorchDevices-totalSize');
    expect(bar.textContent).toBe('1.2 KiB');
  });
});
