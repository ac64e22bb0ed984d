import { TenantActivity } from './tenant-activity';

describe('engine: whether tenants share the engine', () => {
  it('is not shared with no tenant or a single one, however often it is seen', () => {
    const a = new TenantActivity(2_000);
    expect(a.shared(0)).toBe(false);
    for (let t = 0; t < 10_000; t += 100) a.seen('busy', t);
    expect(a.shared(10_000)).toBe(false);
  });

  it('is shared while a second tenant was seen within the window, and no longer after it', () => {
    const a = new TenantActivity(2_000);
    a.seen('busy', 1_000);
    a.seen('quiet', 1_100);
    expect(a.shared(1_100)).toBe(true);
    // The busy tenant goes on alone: shared until the quiet tenant's sighting is a window old.
    a.seen('busy', 2_000);
    a.seen('busy', 3_000);
    expect(a.shared(3_099)).toBe(true);
    expect(a.shared(3_100)).toBe(false);
    a.seen('busy', 4_000);
    expect(a.shared(4_000)).toBe(false);
  });

  it('counts the most recent sighting of any other tenant, among many', () => {
    const a = new TenantActivity(2_000);
    a.seen('t1', 0);
    a.seen('t2', 10);
    a.seen('t3', 20);
    a.seen('t3', 5_000);
    // t2 was seen at 10 ms: long out of the window.
    expect(a.shared(5_000)).toBe(false);
    a.seen('t1', 5_500);
    a.seen('t3', 5_600);
    expect(a.shared(7_499)).toBe(true);
    expect(a.shared(7_500)).toBe(false);
  });

  it('keeps the later time when sightings of one tenant arrive out of order', () => {
    const a = new TenantActivity(1_000);
    a.seen('busy', 500);
    a.seen('quiet', 900);
    a.seen('quiet', 800);
    a.seen('busy', 1_800);
    expect(a.shared(1_899)).toBe(true);
    expect(a.shared(1_900)).toBe(false);
  });
});
