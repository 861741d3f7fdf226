/**
 * The panel's header parts drawn from the kernel's header: the mismatch
 * banner and the per-device bars with their size text (the kernel's words;
 * only a bar's width is computed here, from the fraction it sent).
 */

import { CLASS, el } from './dom';
import type { IDeviceBar, IHeader } from './protocol';

/** The kernel's mismatch warnings in the banner (hidden when there are none). */
export function drawWarnings(banner: HTMLElement, header: IHeader): void {
  const warnings = header.warnings;
  banner.hidden = warnings.length === 0;
  const list = el('ul', `${CLASS}-bannerList`);
  for (const warning of warnings) {
    list.append(el('li', `${CLASS}-warning`, warning));
  }
  banner.replaceChildren(list);
}

/** One bar per device with the kernel's text, and the note on what the totals include. */
export function drawTotals(node: HTMLElement, header: IHeader): void {
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
  // facts about the devices (where CUDA was first initialised, what its used memory is made of)
  for (const line of header.device_notes) {
    fragment.append(el('div', `${CLASS}-deviceNote`, line));
  }
  node.replaceChildren(fragment);
}

function percent(fraction: number): string {
  const clamped = Math.max(0, Math.min(1, Number.isFinite(fraction) ? fraction : 0));
  return `${(clamped * 100).toFixed(1)}%`;
}
