import { NotifyOutbox, type Notification } from './notify-outbox';

/** When the engine's notifications go (the scheduling only; their delivery is tested in test/medium). */
describe('engine: notifications after the commit', () => {
  let sent: Notification[][];
  let settle: (() => void)[];
  let outbox: NotifyOutbox;
  const flushPromises = async () => {
    for (let i = 0; i < 5; i++) await Promise.resolve();
  };

  beforeEach(() => {
    jest.useFakeTimers();
    sent = [];
    settle = [];
    outbox = new NotifyOutbox(
      (batch) =>
        new Promise<void>((r) => {
          sent.push(batch);
          settle.push(r);
        }),
      () => undefined,
      20,
    );
  });
  afterEach(() => jest.useRealTimers());

  it("holds a hop's live-stream notification for the window, one per tenant, the newest", () => {
    outbox.add([['ordo_run_event', 'a 1']]);
    outbox.add([['ordo_run_event', 'a 2']]);
    outbox.add([['ordo_run_event', 'b 7']]);
    jest.advanceTimersByTime(19);
    expect(sent).toEqual([]);
    jest.advanceTimersByTime(1);
    expect(sent).toEqual([
      [
        ['ordo_run_event', 'a 2'],
        ['ordo_run_event', 'b 7'],
      ],
    ]);
  });

  it('sends a wake-up, a run end or a cancel at once, with the stream notifications that wait', () => {
    outbox.add([['ordo_run_event', 'a 1']]);
    outbox.add([
      ['ordo_run_event', 'a 3'],
      ['ordo_run_finished', 'r1'],
    ]);
    expect(sent).toEqual([
      [
        ['ordo_run_event', 'a 3'],
        ['ordo_run_finished', 'r1'],
      ],
    ]);
    outbox.add([['ordo_ready', 'a']]);
    outbox.add([['ordo_ready', 'a']]);
    // One statement at a time: what comes meanwhile goes once the first is sent, repeats merged.
    expect(sent).toHaveLength(1);
    jest.advanceTimersByTime(100);
    expect(sent).toHaveLength(1);
    settle[0]();
    return flushPromises().then(() => expect(sent[1]).toEqual([['ordo_ready', 'a']]));
  });

  it('keeps sending after a failed send, and sends what waits at once when closed', async () => {
    let failures = 0;
    outbox = new NotifyOutbox(
      (batch) => {
        sent.push(batch);
        return sent.length === 1 ? Promise.reject(new Error('gone')) : Promise.resolve();
      },
      () => failures++,
      20,
    );
    outbox.add([['ordo_ready', 'a']]);
    await flushPromises();
    expect(failures).toBe(1);
    outbox.add([['ordo_run_event', 'a 9']]);
    expect(sent).toHaveLength(1);
    await outbox.close();
    expect(sent).toEqual([[['ordo_ready', 'a']], [['ordo_run_event', 'a 9']]]);
    // Once closed, nothing waits.
    outbox.add([['ordo_run_event', 'a 10']]);
    expect(sent).toHaveLength(3);
  });
});
