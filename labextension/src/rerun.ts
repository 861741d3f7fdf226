/**
 * One click from a device error to the fix: after the kernel applied the fix
 * under a diagnosis ("Move x to cuda:0 and re-run"), it sends
 * `{type: "rerun", cell_id}` over the `torchdevice_magic` comm, and the
 * notebook runs that cell itself -- so the execution count and the outputs
 * are the notebook's own, as if the user had pressed Shift+Enter on it.
 */

// Types only: this module is loaded by the connection (and its tests) without
// pulling the notebook's runtime in; running goes through the app's commands.
import type { JupyterFrontEnd } from '@jupyterlab/application';
import type { NotebookPanel } from '@jupyterlab/notebook';

/** JupyterLab's command that runs the selected cells without moving on. */
export const RUN_CELL_COMMAND = 'notebook:run-cell';

export interface IRerunMessage {
  type: 'rerun';
  cell_id: string;
}

/** A kernel message asking to run one cell of this notebook again. */
export function isRerunMessage(data: unknown): data is IRerunMessage {
  if (typeof data !== 'object' || data === null) {
    return false;
  }
  const message = data as Record<string, unknown>;
  return (
    message.type === 'rerun' &&
    typeof message.cell_id === 'string' &&
    message.cell_id.length > 0 &&
    message.cell_id.length <= 1000
  );
}

/**
 * Make the cell with model id `cellId` the active one of its notebook, bring
 * the notebook to the front and run the cell (Ctrl+Enter: run, stay). False
 * when the notebook has no such cell (deleted, or an id from elsewhere).
 */
export async function rerunCell(
  app: Pick<JupyterFrontEnd, 'commands' | 'shell'>,
  panel: NotebookPanel,
  cellId: string
): Promise<boolean> {
  const notebook = panel.content;
  const index = notebook.widgets.findIndex(cell => cell.model.id === cellId);
  if (index < 0) {
    return false;
  }
  app.shell.activateById(panel.id);
  notebook.activeCellIndex = index;
  notebook.deselectAll();
  await app.commands.execute(RUN_CELL_COMMAND);
  return true;
}
