/** An instant as wall-clock time in the given IANA zone, with the zone's name, e.g. "2026-03-29 03:00:00 CEST". */
export function zoned(iso: string | null, timeZone: string): string {
  if (!iso) return '—';
  const parts = new Intl.DateTimeFormat('en-CA', {
    timeZone,
    year: 'numeric',
    month: '2-digit',
    day: '2-digit',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
    hourCycle: 'h23',
    timeZoneName: 'short',
  }).formatToParts(new Date(iso));
  const p = Object.fromEntries(parts.map((x) => [x.type, x.value]));
  return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}:${p.second} ${p.timeZoneName}`;
}

/** The API's local time with offset ("2026-03-29T03:00:00+02:00") as "2026-03-29 03:00:00 +02:00". */
export function localWithOffset(local: string): string {
  const m = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.\d+)?(Z|[+-]\d{2}:\d{2})$/.exec(local);
  return m ? `${m[1]} ${m[2]} ${m[3] === 'Z' ? '+00:00' : m[3]}` : local;
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

export function bytes(n: number): string {
  let v = n;
  let u = 0;
  while (v >= 1024 && u < UNITS.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${String(n)} B` : `${v.toFixed(v < 10 ? 1 : 0)} ${UNITS[u]}`;
}
