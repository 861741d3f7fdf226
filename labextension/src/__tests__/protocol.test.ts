/**
 * The generated protocol: every fixture the kernel produced passes the
 * runtime check built from the same schema; malformed messages do not.
 */
import { PROTOCOL_VERSION, SCHEMA } from '../protocol';
import { messageProblem } from '../validate';
import { fixtureNames, loadFixture } from './fakes';

describe('schema', () => {
  it('is version 4 and lists every message type', () => {
    expect(PROTOCOL_VERSION).toBe(4);
    expect(Object.keys(SCHEMA.messages).sort()).toEqual(
      [
        'delta',
        'engines',
        'engines_reachable',
        'gather_engines',
        'move',
        'refresh',
        'reply',
        'rerun',
        'timeline',
        'undo',
        'unloaded',
        'view',
        'window'
      ].sort()
    );
  });

  it.each(fixtureNames())('%s passes the check', name => {
    expect(messageProblem(loadFixture(name))).toBeNull();
  });

  it('refuses malformed messages with a reason', () => {
    const view = loadFixture('basic') as unknown as Record<string, unknown>;
    expect(messageProblem({ ...view, version: 1 })).toMatch(/version/);
    expect(messageProblem({ ...view, type: 'snapshot' })).toMatch(/unknown message type/);
    expect(messageProblem({ ...view, seq: 'x' })).toMatch(/seq/);
    const header = { ...(view.header as object), bars: [{ device: 'cpu' }] };
    expect(messageProblem({ ...view, header })).toMatch(/bars\[0\] lacks bytes/);
    expect(messageProblem({ ...view, type: 'move' })).toMatch(/unknown message type/);
  });
});
