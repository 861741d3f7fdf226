/**
 * Formatting shared by the panel. Sizes follow `torchdevice_magic/units.py`
 * (`format_bytes`) so the sidebar and the notebook say the same thing:
 * "0 B", "512 B", "16.0 KiB", "1.5 MiB", "80.0 GiB".
 */

const UNITS = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

export function formatBytes(bytes: number): string {
  let size = Number.isFinite(bytes) ? bytes : 0;
  if (Math.abs(size) < 1024) {
    return `${Math.trunc(size)} B`;
  }
  for (const unit of UNITS) {
    size /= 1024;
    if (Math.abs(size) < 1024 || unit === UNITS[UNITS.length - 1]) {
      return `${size.toFixed(1)} ${unit}`;
    }
  }
  return `${size.toFixed(1)} PiB`;
}

export function formatShape(shape: number[] | null): string {
  return shape === null ? '—' : `[${shape.join(', ')}]`;
}

// eslint-disable-next-line no-control-regex
const ANSI = /\u001b\[[0-9;]*[A-Za-z]/g;
const MAX_MESSAGE = 300;

/**
 * One line a person can read: the kernel sends one-line messages, but this
 * also guards the status line against tracebacks (keep the last line, which
 * says what went wrong) and very long text.
 */
export function oneLine(message: string): string {
  const lines = message
    .replace(ANSI, '')
    .split(/\r?\n/)
    .map(line => line.trim())
    .filter(line => line.length > 0);
  if (lines.length === 0) {
    return '';
  }
  const traceback = lines.some(line => line.startsWith('Traceback (most recent call last)'));
  let text = traceback ? lines[lines.length - 1] : lines[0];
  if (text.length > MAX_MESSAGE) {
    text = `${text.slice(0, MAX_MESSAGE - 1)}…`;
  }
  return text;
}
