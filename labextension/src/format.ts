/**
 * Text for the status line. Sizes are never formatted here: every size the
 * sidebar shows is text the kernel's view model wrote (units.py's format_bytes).
 */

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
