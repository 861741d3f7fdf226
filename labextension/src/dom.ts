/**
 * The few DOM helpers the panel and its table share: elements with a class
 * and text (always textContent: nothing from the kernel becomes markup), and
 * buttons drawn as the kernel says.
 */

import type { IAction } from './protocol';

/** The sidebar's class prefix (style/base.css). */
export const CLASS = 'jp-TorchDevices';

export function el<K extends keyof HTMLElementTagNameMap>(
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

export function button(className: string, label: string, ariaLabel: string): HTMLButtonElement {
  const node = el('button', `${CLASS}-button ${className}`, label);
  node.type = 'button';
  node.setAttribute('aria-label', ariaLabel);
  return node;
}

/** A button as the kernel says: its label, enabled or not, and why. */
export function drawAction(node: HTMLButtonElement, action: IAction, waitReason: string): void {
  node.textContent = action.label;
  node.setAttribute('aria-label', action.label);
  node.disabled = !action.enabled || waitReason !== '';
  node.title = waitReason || action.reason;
}
