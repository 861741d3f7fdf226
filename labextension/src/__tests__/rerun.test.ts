/**
 * The kernel's "rerun" message (after a one-click fix) reaches the notebook.
 */
import { isRerunMessage } from '../rerun';
import { connectedPanel, loadFixture } from './fakes';

describe('rerun', () => {
  it('recognises only well-formed rerun messages', () => {
    expect(isRerunMessage({ type: 'rerun', cell_id: 'abc' })).toBe(true);
    expect(isRerunMessage({ type: 'rerun', cell_id: '' })).toBe(false);
    expect(isRerunMessage({ type: 'rerun', cell_id: 7 })).toBe(false);
    expect(isRerunMessage({ type: 'rerun', cell_id: 'x'.repeat(1001) })).toBe(false);
    expect(isRerunMessage({ type: 'snapshot' })).toBe(false);
    expect(isRerunMessage(null)).toBe(false);
  });

  it('the connection asks for the cell to be re-run and keeps its view', async () => {
    const h = await connectedPanel(loadFixture('basic'));
    const asked: string[] = [];
    h.connection.rerunRequested.connect((_, cellId) => {
      asked.push(cellId);
    });
    const before = h.connection.view;
    h.comm.receive({
      protocol: 'torchdevice_magic',
      version: 4,
      type: 'rerun',
      seq: 9,
      cell_id: 'c-42'
    });
    expect(asked).toEqual(['c-42']);
    expect(h.connection.view?.rows).toBe(before?.rows);
    h.panel.dispose();
    h.connection.dispose();
  });
});

describe('rerunCell', () => {
  const fakePanel = (ids: string[]) => {
    const notebook = {
      widgets: ids.map(id => ({ model: { id } })),
      activeCellIndex: -1,
      deselectAll: jest.fn()
    };
    return { id: 'nb-1', content: notebook };
  };

  it('activates the notebook and that cell, then runs it', async () => {
    const { rerunCell, RUN_CELL_COMMAND } = await import('../rerun');
    const panel = fakePanel(['a', 'b', 'c']);
    const order: string[] = [];
    const app = {
      shell: { activateById: (id: string) => order.push(`activate ${id}`) },
      commands: {
        execute: async (command: string) => {
          order.push(`${command} at ${panel.content.activeCellIndex}`);
        }
      }
    };
    const ran = await rerunCell(app as never, panel as never, 'b');
    expect(ran).toBe(true);
    expect(order).toEqual(['activate nb-1', `${RUN_CELL_COMMAND} at 1`]);
    expect(await rerunCell(app as never, panel as never, 'gone')).toBe(false);
    expect(order).toHaveLength(2);
  });
});
