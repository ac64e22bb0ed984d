import dns from 'node:dns';
import net from 'node:net';
import { parsePrivateAllowList } from '../../core/net/ip-range';

/**
 * Network egress policy for plugins: a step reaches only the hosts in its `egress` list.
 *
 * Entries are `host`, `host:port`, `*.suffix` (any subdomain of suffix, not suffix itself),
 * an IPv4 literal or a bracketed IPv6 literal, each optionally with `:port`. An entry without a
 * port allows any port. Matching is case-insensitive.
 *
 * A hostname is resolved here and every resolved address is checked: loopback, private, shared
 * (CGNAT), link-local (cloud metadata), unique-local, multicast, unspecified and reserved addresses
 * are refused, also in their IPv4-mapped IPv6 forms. Such an address is reached only when an entry
 * names the IP literal itself (`127.0.0.1:8080`) AND the operator's policy lists its range
 * (`ORDO_EGRESS_ALLOW_PRIVATE`, empty by default): a tenant alone can never point a step at the
 * instance's own services (its PostgreSQL, Redis, API) or its network, and a hostname never unlocks
 * one, since its DNS answer is not under the operator's control. Link-local ranges (cloud metadata)
 * cannot be listed at all. The checked address is then pinned for the connection (see
 * `pinnedLookup`), so a second DNS answer cannot swap it (DNS rebinding).
 */

export class EgressError extends Error {
  constructor(
    readonly code: 'EGRESS_DENIED',
    message: string,
  ) {
    super(message);
    this.name = 'EgressError';
  }
  readonly retryable = false;
}

export interface EgressTarget {
  url: URL;
  /** The host as written in the URL (brackets removed for IPv6). */
  hostname: string;
  port: number;
  /** The checked address the connection must use. */
  address: string;
  family: 4 | 6;
}

interface EgressRule {
  wildcard: boolean;
  host: string;
  port?: number;
  /** The host is an IP literal. */
  ip: boolean;
}

export type Resolver = (hostname: string) => Promise<{ address: string; family: number }[]>;

const systemResolver: Resolver = (hostname) => dns.promises.lookup(hostname, { all: true, verbatim: true });

/** The operator's part of the egress rules; a step's `egress` list is the tenant's part. */
export interface EgressPolicy {
  /** Special (private, loopback, …) addresses an entry naming their IP literal may reach. */
  allowPrivate: net.BlockList;
  /** The ranges of `allowPrivate` as configured, for messages. */
  allowPrivateText: readonly string[];
  resolve?: Resolver;
}

/** The default policy: no special address is reachable, whatever a step names. */
export const STRICT_EGRESS: EgressPolicy = { allowPrivate: new net.BlockList(), allowPrivateText: [] };

/**
 * The policy for the operator's list of special ranges a step may reach by IP literal
 * (`10.0.0.0/8`, `127.0.0.1`, `fd00::/8`; see parsePrivateAllowList, which refuses link-local ranges).
 */
export function egressPolicy(ranges: readonly string[], resolve?: Resolver): EgressPolicy {
  const list = new net.BlockList();
  for (const r of parsePrivateAllowList(ranges)) list.addSubnet(r.ip, r.prefix, r.family);
  return { allowPrivate: list, allowPrivateText: ranges.map((r) => r.trim()), resolve };
}

function normalizeHost(h: string): string {
  let host = h.toLowerCase();
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1);
  if (host.endsWith('.')) host = host.slice(0, -1);
  return host;
}

/** Parses one egress entry; throws on a malformed one (the DAG schema already rejects those). */
export function parseEgressRule(entry: string): EgressRule {
  const m = /^(\*\.)?(\[[0-9A-Fa-f:.]+\]|[^:[\]]+)(?::(\d{1,5}))?$/.exec(entry.trim());
  if (!m) throw new EgressError('EGRESS_DENIED', `malformed egress entry "${entry}"`);
  const host = normalizeHost(m[2]);
  const port = m[3] === undefined ? undefined : Number(m[3]);
  if (port !== undefined && (port < 1 || port > 65535))
    throw new EgressError('EGRESS_DENIED', `malformed egress entry "${entry}"`);
  return { wildcard: Boolean(m[1]), host, port, ip: net.isIP(host) !== 0 };
}

function canonicalIp(ip: string): string {
  // `new URL` already canonicalizes literals in URLs; entries are canonicalized the same way.
  if (net.isIPv6(ip)) return new URL(`http://[${ip}]/`).hostname.slice(1, -1);
  if (net.isIPv4(ip)) return new URL(`http://${ip}/`).hostname;
  return ip;
}

function ruleMatches(rule: EgressRule, hostname: string, port: number): boolean {
  if (rule.port !== undefined && rule.port !== port) return false;
  if (rule.ip) return net.isIP(hostname) !== 0 && canonicalIp(rule.host) === canonicalIp(hostname);
  if (rule.wildcard) return net.isIP(hostname) === 0 && hostname.endsWith(`.${rule.host}`);
  return hostname === rule.host;
}

const special = new net.BlockList();
for (const [net4, prefix] of [
  ['0.0.0.0', 8], // "this network", unspecified
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // shared address space (CGNAT)
  ['127.0.0.0', 8],
  ['169.254.0.0', 16], // link-local, incl. cloud metadata 169.254.169.254
  ['172.16.0.0', 12],
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // documentation
  ['192.168.0.0', 16],
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
] as const) {
  special.addSubnet(net4, prefix, 'ipv4');
}
for (const [net6, prefix] of [
  ['::', 128], // unspecified
  ['::1', 128], // loopback
  ['64:ff9b::', 96], // NAT64 (embeds an IPv4 address)
  ['100::', 64], // discard
  ['2001:db8::', 32], // documentation
  ['fc00::', 7], // unique-local (incl. fd00::/8)
  ['fe80::', 10], // link-local
  ['fec0::', 10], // site-local (deprecated)
  ['ff00::', 8], // multicast
] as const) {
  special.addSubnet(net6, prefix, 'ipv6');
}

/** The IPv4 address embedded in an IPv4-mapped (::ffff:a.b.c.d) or IPv4-compatible IPv6 address. */
function embeddedIpv4(ip6: string): string | undefined {
  const canon = canonicalIp(ip6);
  const m =
    /^::(?:ffff:)?([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(canon) ?? /^::(?:ffff:)?(\d+\.\d+\.\d+\.\d+)$/.exec(canon);
  if (!m) return undefined;
  if (m.length === 2) return m[1];
  const hi = parseInt(m[1], 16);
  const lo = parseInt(m[2], 16);
  return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
}

/** True for addresses a step may reach only through an entry naming the IP literal. */
export function isSpecialAddress(ip: string): boolean {
  if (net.isIPv4(ip)) return special.check(ip, 'ipv4');
  if (!net.isIPv6(ip)) return true;
  const v4 = embeddedIpv4(ip);
  if (v4 !== undefined) return special.check(v4, 'ipv4');
  return special.check(ip, 'ipv6');
}

/** The port a URL connects to: its own, else the scheme's default. */
export function urlPort(url: URL): number {
  return url.port ? Number(url.port) : url.protocol === 'https:' ? 443 : 80;
}

/**
 * Whether an entry of the egress list matches `host` and `port`: the step's part of the rules
 * alone. Special addresses, DNS answers and the operator's policy are checked at connection time.
 */
export function egressListAllows(egress: readonly string[], host: string, port: number): boolean {
  const hostname = normalizeHost(host);
  return egress.map(parseEgressRule).some((r) => ruleMatches(r, hostname, port));
}

/** Whether the operator's policy lets an entry naming the literal reach the special address `ip`. */
function privateAllowed(ip: string, policy: EgressPolicy): boolean {
  const v4 = net.isIPv4(ip) ? ip : embeddedIpv4(ip);
  return v4 !== undefined ? policy.allowPrivate.check(v4, 'ipv4') : policy.allowPrivate.check(ip, 'ipv6');
}

function privateDenied(where: string, policy: EgressPolicy): EgressError {
  const allowed = policy.allowPrivateText.length > 0 ? policy.allowPrivateText.join(', ') : 'none';
  return new EgressError(
    'EGRESS_DENIED',
    `${where} is a private or reserved address, and the instance lets steps reach only these such ranges: ${allowed} (ORDO_EGRESS_ALLOW_PRIVATE)`,
  );
}

/**
 * Checks `rawUrl` (http or https) against the egress list and the operator's policy, resolves its
 * host and returns the address to pin. Throws EgressError (EGRESS_DENIED) when the URL, host, port
 * or any resolved address is not allowed.
 */
export async function checkEgress(
  rawUrl: string | URL,
  egress: readonly string[],
  policy: EgressPolicy = STRICT_EGRESS,
): Promise<EgressTarget> {
  let url: URL;
  try {
    url = new URL(rawUrl);
  } catch {
    throw new EgressError('EGRESS_DENIED', `not a valid URL: ${String(rawUrl)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new EgressError('EGRESS_DENIED', `only http and https URLs are allowed, not ${url.protocol}`);
  }
  if (url.username || url.password) throw new EgressError('EGRESS_DENIED', 'URLs with credentials are not allowed');
  return { url, ...(await checkDestination(url.hostname, urlPort(url), egress, policy)) };
}

/**
 * Checks a host and port (a name, an IPv4 literal or an IPv6 literal with or without brackets)
 * against the egress list and the operator's policy; answers the checked address to connect to.
 */
export async function checkDestination(
  host: string,
  port: number,
  egress: readonly string[],
  policy: EgressPolicy = STRICT_EGRESS,
): Promise<Omit<EgressTarget, 'url'>> {
  const hostname = normalizeHost(host);
  const where = `${hostname.includes(':') ? `[${hostname}]` : hostname}:${port}`;
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    throw new EgressError('EGRESS_DENIED', `bad port in ${where}`);
  if (!egressListAllows(egress, hostname, port)) {
    throw new EgressError(
      'EGRESS_DENIED',
      egress.length === 0
        ? `network access is denied: the step declares no egress (wanted ${where})`
        : `${where} is not in the step's egress list`,
    );
  }

  if (net.isIP(hostname) !== 0) {
    // A literal is matched only by a rule naming that literal.
    if (isSpecialAddress(hostname) && !privateAllowed(hostname, policy)) throw privateDenied(where, policy);
    return { hostname, port, address: canonicalIp(hostname), family: net.isIPv6(hostname) ? 6 : 4 };
  }

  let answers: { address: string; family: number }[];
  try {
    answers = await (policy.resolve ?? systemResolver)(hostname);
  } catch (e) {
    throw new EgressError(
      'EGRESS_DENIED',
      `cannot resolve ${hostname}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`,
    );
  }
  if (answers.length === 0) throw new EgressError('EGRESS_DENIED', `cannot resolve ${hostname}`);
  // Every answer must be public: a mixed answer is how rebinding attacks hedge their bets.
  const bad = answers.find((a) => isSpecialAddress(a.address));
  if (bad)
    throw new EgressError('EGRESS_DENIED', `${hostname} resolves to ${bad.address}, a private or reserved address`);
  const pick = answers[0];
  return { hostname, port, address: pick.address, family: pick.family === 6 ? 6 : 4 };
}

type LookupCallback = (
  err: NodeJS.ErrnoException | null,
  address: string | dns.LookupAddress[],
  family?: number,
) => void;

/**
 * A `lookup` for http(s).request that answers only the checked address, whatever name is asked:
 * the connection goes where the check looked, and TLS still verifies the certificate against the
 * URL's hostname (SNI and servername stay the name).
 */
export function pinnedLookup(target: Pick<EgressTarget, 'address' | 'family'>) {
  return (_hostname: string, options: dns.LookupOptions | number | LookupCallback, cb?: LookupCallback): void => {
    const callback = (typeof options === 'function' ? options : cb)!;
    const all = typeof options === 'object' && options !== null && options.all === true;
    if (all) callback(null, [{ address: target.address, family: target.family }]);
    else callback(null, target.address, target.family);
  };
}
