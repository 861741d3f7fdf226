import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { DeviceConnection } from './connection';
import { chipIcon } from './icon';
import { DevicePanel } from './panel';
import { rerunCell } from './rerun';

const PLUGIN_ID = 'torchdevice-magic:plugin';
const COMMAND_SHOW = 'torchdevice-magic:show';

/**
 * The "Devices" sidebar. One DeviceConnection per open notebook registers the
 * comm target on that notebook's kernel (so `%load_ext torchdevice_magic`
 * reaches us whenever it runs); the panel shows the current notebook's.
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Sidebar listing tensors, modules and optimizers by device, with moves and undo.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ILayoutRestorer, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null
  ) => {
    const panel = new DevicePanel();
    panel.title.icon = chipIcon;
    app.shell.add(panel, 'right', { rank: 650 });
    restorer?.add(panel, panel.id);

    const connections = new Map<NotebookPanel, DeviceConnection>();
    const connectionFor = (notebook: NotebookPanel): DeviceConnection => {
      let connection = connections.get(notebook);
      if (!connection) {
        connection = new DeviceConnection(notebook.sessionContext);
        connections.set(notebook, connection);
        connection.rerunRequested.connect((_, cellId) => {
          void rerunCell(app, notebook, cellId);
        });
        notebook.disposed.connect(() => {
          connections.get(notebook)?.dispose();
          connections.delete(notebook);
          if (!tracker.currentWidget) {
            panel.setConnection(null);
          }
        });
        // Fires for focus and dirty-state changes too: only the label is updated.
        notebook.title.changed.connect(() => {
          if (tracker.currentWidget === notebook) {
            panel.setLabel(notebook.title.label);
          }
        });
      }
      return connection;
    };

    const follow = (): void => {
      const notebook = tracker.currentWidget;
      if (!notebook || notebook.isDisposed) {
        panel.setConnection(null);
        return;
      }
      const connection = connectionFor(notebook);
      connection.activate();
      panel.setConnection(connection, notebook.title.label);
    };

    tracker.widgetAdded.connect((_, notebook) => {
      connectionFor(notebook);
    });
    tracker.forEach(notebook => {
      connectionFor(notebook);
    });
    tracker.currentChanged.connect(follow);
    follow();

    app.commands.addCommand(COMMAND_SHOW, {
      label: 'Show Devices (torchdevice_magic)',
      caption: 'Show tensors, modules and optimizers by device',
      icon: chipIcon,
      execute: () => {
        app.shell.activateById(panel.id);
      }
    });
    palette?.addItem({ command: COMMAND_SHOW, category: 'PyTorch' });
  }
};

export default plugin;
