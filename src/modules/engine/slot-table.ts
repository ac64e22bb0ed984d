/**
 * Entries by string key for a table that lives as long as the process and turns over thousands of
 * entries a second (the steps a worker runs): kept in a plain object, not a Map.
 *
 * A Map rebuilds its hash table as entries come and go, and V8 links each table it replaced to the
 * one that replaced it (so that the Map's live iterators can follow). A Map that lives as long as
 * the process has its table in the old generation; each table it drops is then old garbage that
 * points at a young table, which the next scavenge therefore keeps, with every entry it holds, and
 * the one after promotes; that table in turn points at the next one. Until a full collection, each
 * scavenge so keeps the steps that had been running (their claimed rows, their plugin calls) and
 * promotes them, which makes scavenges long and frequent under a steady load. An object in
 * dictionary mode drops its old table without such a link.
 */
export class SlotTable<V> {
  private table: Record<string, V> = Object.create(null) as Record<string, V>;
  private count = 0;

  get size(): number {
    return this.count;
  }

  get(key: string): V | undefined {
    return this.table[key];
  }

  set(key: string, value: V): this {
    if (!(key in this.table)) this.count += 1;
    this.table[key] = value;
    return this;
  }

  delete(key: string): boolean {
    if (!(key in this.table)) return false;
    delete this.table[key];
    this.count -= 1;
    return true;
  }

  values(): V[] {
    return Object.values(this.table);
  }

  entries(): [string, V][] {
    return Object.entries(this.table);
  }
}
