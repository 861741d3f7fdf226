/**
 * The transport alone (kernel.ts): states, the comm it keeps, what it says
 * when the comm goes away, against a fake kernel and no protocol on top.
 */
import type { ISessionContext } from '@jupyterlab/apputils';

import { DropReason, KernelChannel } from '../kernel';
import type { IStatusLine } from '../tokens';
import { FakeKernel, FakeSessionContext, flush } from './fakes';

interface IRecorded {
  channel: KernelChannel;
  kernel: FakeKernel;
  session: FakeSessionContext;
  data: unknown[];
  opened: unknown[];
  dropped: DropReason[];
  news: IStatusLine[];
}

const channels: KernelChannel[] = [];

afterEach(() => {
  while (channels.length) {
    channels.pop()!.dispose();
  }
});

async function shown(kernel = new FakeKernel()): Promise<IRecorded> {
  const session = new FakeSessionContext(kernel);
  const channel = new KernelChannel(session as unknown as ISessionContext, { busyDelayMs: 0 });
  channels.push(channel);
  const recorded: IRecorded = {
    channel,
    kernel,
    session,
    data: [],
    opened: [],
    dropped: [],
    news: []
  };
  channel.dataReceived.connect((_, data) => recorded.data.push(data));
  channel.kernelOpened.connect((_, data) => recorded.opened.push(data));
  channel.dropped.connect((_, reason) => recorded.dropped.push(reason));
  channel.news.connect((_, line) => recorded.news.push(line));
  channel.activate();
  await flush();
  return recorded;
}

describe('KernelChannel', () => {
  it('probes once shown and passes on what arrives on its comm', async () => {
    const r = await shown();
    expect(r.channel.state).toBe('connecting');
    expect(r.kernel.comms).toHaveLength(1);
    r.kernel.liveComm!.receive({ type: 'anything' });
    expect(r.data).toEqual([{ type: 'anything' }]);
    expect(r.channel.send({ type: 'refresh' })).toBe(true);
    expect(r.kernel.liveComm!.sent).toEqual([{ type: 'refresh' }]);
  });

  it('the kernel closing the probe means not loaded; the window is stale', async () => {
    const r = await shown();
    r.kernel.liveComm!.kernelCloses();
    expect(r.channel.state).toBe('not-loaded');
    expect(r.channel.connected).toBe(false);
    expect(r.dropped).toEqual(['closed']);
  });

  it('a comm the kernel opens replaces the probe; the old one is closed and ignored', async () => {
    const r = await shown();
    const probe = r.kernel.liveComm!;
    r.kernel.openCommFromKernel({ first: 'window' });
    expect(r.dropped).toEqual(['replaced']);
    expect(probe.closedByFrontend).toBe(true);
    expect(r.opened).toEqual([{ first: 'window' }]);
    probe.receive({ late: true });
    expect(r.data).toEqual([]);
  });

  it('a restart drops the comm, then a fresh probe goes out when idle', async () => {
    const r = await shown();
    r.session.setStatus('restarting');
    expect(r.channel.state).toBe('restarting');
    expect(r.dropped).toEqual(['restarting']);
    r.kernel.liveComm!.isDisposed = true;
    r.session.setStatus('idle');
    expect(r.kernel.comms).toHaveLength(2);
    expect(r.channel.state).toBe('connecting');
  });

  it('says why a send failed, in one line', async () => {
    const r = await shown();
    r.kernel.liveComm!.isDisposed = true; // FakeComm.send throws then
    expect(r.channel.send({ type: 'refresh' })).toBe(false);
    expect(r.news).toEqual([
      { message: 'Could not send to the kernel: Cannot send', kind: 'error' }
    ]);
  });

  it('a new kernel: leaves the old one and makes the window stale', async () => {
    const r = await shown();
    const next = new FakeKernel();
    r.session.changeKernel(next);
    expect(r.kernel.targets.size).toBe(0);
    expect(r.dropped).toEqual(['detached']);
    await flush();
    expect(next.comms).toHaveLength(1);
  });
});
