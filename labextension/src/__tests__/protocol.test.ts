import { formatBytes, formatShape, oneLine } from '../format';
import {
  isReply,
  isSnapshot,
  moveRequest,
  PROTOCOL_NAME,
  PROTOCOL_VERSION,
  refreshRequest,
  snapshotProblem,
  undoRequest
} from '../protocol';
import { fixtureNames, loadFixture } from './fakes';

describe('fixtures', () => {
  it('are there', () => {
    expect(fixtureNames()).toEqual(
      expect.arrayContaining([
        'snapshot_basic.json',
        'snapshot_cuda.json',
        'snapshot_empty.json',
        'snapshot_mixed.json'
      ])
    );
  });

  it.each(fixtureNames())('%s is a snapshot of this protocol version', name => {
    const snapshot = loadFixture(name);
    expect(snapshotProblem(snapshot)).toBeNull();
    expect(isSnapshot(snapshot)).toBe(true);
    expect(snapshot.version).toBe(PROTOCOL_VERSION);
  });
});

describe('snapshotProblem', () => {
  it('names what is wrong', () => {
    const snapshot = loadFixture('basic');
    expect(snapshotProblem({ ...snapshot, version: 2 })).toMatch(/version 2/);
    const badRow = { ...snapshot.rows[0], bytes: '12' };
    expect(snapshotProblem({ ...snapshot, rows: [badRow] })).toMatch(/row 'x'/);
    expect(snapshotProblem({ ...snapshot, targets: [{ device: 'cpu' }] })).toMatch(/target/);
    expect(snapshotProblem(null)).toBe('not an object');
    expect(snapshotProblem({ ...snapshot, type: 'reply' })).toBe('not a snapshot');
  });
});

describe('requests', () => {
  it('carry protocol, version, type and request_id', () => {
    expect(refreshRequest('r1')).toEqual({
      protocol: PROTOCOL_NAME,
      version: PROTOCOL_VERSION,
      type: 'refresh',
      request_id: 'r1'
    });
    expect(undoRequest('r2')).toEqual({
      protocol: PROTOCOL_NAME,
      version: PROTOCOL_VERSION,
      type: 'undo',
      request_id: 'r2'
    });
    expect(moveRequest('r3', 'meta', null)).toEqual({
      protocol: PROTOCOL_NAME,
      version: PROTOCOL_VERSION,
      type: 'move',
      request_id: 'r3',
      device: 'meta',
      names: null
    });
    const names = ['a', 'b'];
    const request = moveRequest('r4', 'cpu', names);
    names.push('c');
    expect(request.names).toEqual(['a', 'b']);
  });

  it('replies are recognised', () => {
    const reply = {
      protocol: PROTOCOL_NAME,
      version: 1,
      type: 'reply',
      request_id: 'r1',
      ok: false,
      message: 'no',
      outcome: null
    };
    expect(isReply(reply)).toBe(true);
    expect(isReply({ ...reply, ok: 'no' })).toBe(false);
    expect(isReply({ ...reply, outcome: { action: 'move', ok: true, message: 'm' } })).toBe(true);
    expect(isReply({ ...reply, outcome: { action: 'jump' } })).toBe(false);
  });
});

describe('formatBytes', () => {
  it.each([
    [0, '0 B'],
    [512, '512 B'],
    [1023, '1023 B'],
    [1024, '1.0 KiB'],
    [16384, '16.0 KiB'],
    [1536 * 1024, '1.5 MiB'],
    [80 * 1024 ** 3, '80.0 GiB'],
    [1023.9, '1023 B'],
    [3 * 1024 ** 4, '3.0 TiB'],
    [5 * 1024 ** 6, '5120.0 PiB']
  ])('%d bytes is %s', (bytes, text) => {
    expect(formatBytes(bytes)).toBe(text);
  });
});

describe('formatShape', () => {
  it('reads like a list', () => {
    expect(formatShape([64, 128])).toBe('[64, 128]');
    expect(formatShape([])).toBe('[]');
    expect(formatShape(null)).toBe('—');
  });
});

describe('oneLine', () => {
  it('keeps the last line of a traceback, never the trace', () => {
    const trace =
      'Traceback (most recent call last):\n  File "x.py", line 1\n    boom()\nRuntimeError: out of memory';
    expect(oneLine(trace)).toBe('RuntimeError: out of memory');
  });

  it('strips ANSI colours and long text', () => {
    expect(oneLine('\u001b[0;31mValueError\u001b[0m: bad')).toBe('ValueError: bad');
    expect(oneLine('x'.repeat(1000)).length).toBeLessThanOrEqual(300);
    expect(oneLine('first\nsecond')).toBe('first');
  });
});
