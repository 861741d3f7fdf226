/**
 * What the Devices panel needs from one notebook's kernel, as an interface:
 * the panel (panel.ts) draws an `IDeviceSource` and sends it the user's
 * requests; `DeviceConnection` (connection.ts) implements it over the comm
 * transport (kernel.ts), and tests may implement it with anything.
 */

import type { ISignal } from '@lumino/signaling';

import type { IEnginesMessage, IWindowSpec } from './protocol';
import type { ITimelineMessage } from './timeline';
import type { IMirror } from './window';

export type ConnectionState =
  /** The notebook has no kernel. */
  | 'no-kernel'
  /** A kernel is there; we are waiting for it or checking its language. */
  | 'starting'
  /** The kernel's language is not Python. */
  | 'not-python'
  /** A comm is open (or opening); the first snapshot has not come yet. */
  | 'connecting'
  /** The kernel has no `torchdevice_magic` comm target. */
  | 'not-loaded'
  /** `%load_ext torchdevice_magic` is running. */
  | 'loading'
  /** A snapshot is there to show (it may say torch is not imported). */
  | 'ready'
  | 'restarting'
  | 'dead';

export type StatusKind = 'info' | 'ok' | 'error';

export interface IStatusLine {
  message: string;
  kind: StatusKind;
}

/** One notebook's devices as the panel sees them, and what it can ask for. */
export interface IDeviceSource {
  /** Emitted whenever anything the panel shows has changed. */
  readonly changed: ISignal<IDeviceSource, void>;
  readonly state: ConnectionState;
  /** The window and header the kernel last sent (deltas applied); kept while busy. */
  readonly view: IMirror | null;
  /** The window this sidebar wants (sort, filter, page, target). */
  readonly spec: IWindowSpec;
  /** The last memory timeline, or null before the first. */
  readonly timeline: ITimelineMessage | null;
  /** Every ipyparallel engine's summary as last gathered, or null before the first. */
  readonly engines: IEnginesMessage | null;
  /** The kernel has an open ipyparallel client to gather from (the kernel says so). */
  readonly enginesReachable: boolean;
  /** The line under the table: the last reply or outcome, or a problem. */
  readonly status: IStatusLine | null;
  /** The kernel has been busy for a while (a cell is running). */
  readonly busy: boolean;
  /** A move or undo was sent and its reply has not come yet. */
  readonly actionPending: boolean;
  /** Requests can be sent. */
  readonly connected: boolean;
  /** The kernel's language as it reports it, once known. */
  readonly language: string | null;
  /** How many whole views and deltas came (browser tests read them off the panel). */
  readonly received: { readonly view: number; readonly delta: number };

  refresh(): string | null;
  /** Ask the kernel for another window (sort, filter, page or target changed). */
  requestWindow(spec: IWindowSpec): string | null;
  /** Move the named objects, or everything movable when `names` is null. */
  move(device: string, names: string[] | null): string | null;
  undo(): string | null;
  /** Gather every ipyparallel engine's summary (and engine `expand`'s objects unless null). */
  requestEngines(expand: number | null): string | null;
  /** Run `%load_ext torchdevice_magic` in the kernel, then connect. */
  loadExtension(): Promise<void>;
}
