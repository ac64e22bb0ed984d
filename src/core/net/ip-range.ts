import net from 'node:net';

export interface IpRange {
  ip: string;
  prefix: number;
  family: 'ipv4' | 'ipv6';
}

/** Parses `a.b.c.d`, `a.b.c.d/n`, an IPv6 address or `ipv6/n`; throws naming the entry otherwise. */
export function parseIpRange(entry: string): IpRange {
  const m = /^([^/]+?)(?:\/(\d{1,3}))?$/.exec(entry.trim());
  const ip = m?.[1] ?? '';
  const family = net.isIPv4(ip) ? 'ipv4' : net.isIPv6(ip) ? 'ipv6' : undefined;
  const bits = family === 'ipv4' ? 32 : 128;
  const prefix = m?.[2] === undefined ? bits : Number(m[2]);
  if (!family || prefix > bits) throw new Error(`"${entry.trim()}" is not an IP address or a CIDR range`);
  return { ip, prefix, family };
}

const linkLocal = new net.BlockList();
linkLocal.addSubnet('169.254.0.0', 16, 'ipv4');
linkLocal.addSubnet('fe80::', 10, 'ipv6');

/** Whether the range holds a link-local address (169.254.0.0/16, fe80::/10: cloud metadata lives there). */
export function coversLinkLocal(r: IpRange): boolean {
  const range = new net.BlockList();
  range.addSubnet(r.ip, r.prefix, r.family);
  // Aligned ranges overlap exactly when one holds the other's first address.
  return linkLocal.check(r.ip, r.family) || range.check(r.family === 'ipv4' ? '169.254.0.0' : 'fe80::', r.family);
}

/**
 * Parses the operator's list of private ranges tenants' steps may reach by IP literal; link-local
 * ranges are refused, since no step may ever reach cloud metadata.
 */
export function parsePrivateAllowList(ranges: readonly string[]): IpRange[] {
  return ranges.map((entry) => {
    const r = parseIpRange(entry);
    if (coversLinkLocal(r))
      throw new Error(`"${entry.trim()}" covers link-local addresses (cloud metadata), which a step may never reach`);
    return r;
  });
}
