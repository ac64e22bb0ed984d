import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { checkEgress, egressPolicy, isSpecialAddress, pinnedLookup, type Resolver } from './egress';
import { egressRequest } from './egress-http';

const fixed =
  (answers: Record<string, string[]>): Resolver =>
  async (host) => {
    const a = answers[host];
    if (!a) throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
    return a.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  };

describe('isSpecialAddress', () => {
  it.each([
    '127.0.0.1',
    '10.1.2.3',
    '172.16.0.1',
    '172.31.255.255',
    '192.168.1.1',
    '100.64.0.1',
    '169.254.169.254',
    '0.0.0.0',
    '224.0.0.1',
    '255.255.255.255',
    '::1',
    '::',
    'fe80::1',
    'fd00::1',
    'fc00::1',
    'ff02::1',
    '::ffff:127.0.0.1',
    '::ffff:169.254.169.254',
    '::ffff:a9fe:a9fe',
    '::ffff:10.0.0.1',
    '64:ff9b::a9fe:a9fe',
  ])('refuses %s', (ip) => expect(isSpecialAddress(ip)).toBe(true));

  it.each(['8.8.8.8', '1.1.1.1', '172.32.0.1', '2606:4700:4700::1111', '::ffff:8.8.8.8'])(
    'allows the public address %s',
    (ip) => expect(isSpecialAddress(ip)).toBe(false),
  );
});

describe('checkEgress', () => {
  const answers = fixed({
    'api.example.com': ['93.184.216.34'],
    'a.b.example.com': ['93.184.216.35'],
    'rebind.example.com': ['93.184.216.34', '127.0.0.1'],
    'metadata.example.com': ['169.254.169.254'],
    'v6.example.com': ['fd00::5'],
    'mapped.example.com': ['::ffff:127.0.0.1'],
  });
  // The operator lists loopback for IP-literal entries; nothing else special.
  const dns = egressPolicy(['127.0.0.1', '::1'], answers);

  it('denies everything when the step declares no egress', async () => {
    await expect(checkEgress('https://api.example.com/x', [], dns)).rejects.toMatchObject({ code: 'EGRESS_DENIED' });
  });

  it('allows an exact host on any port and pins its resolved address', async () => {
    const t = await checkEgress('https://API.example.com:8443/x', ['api.example.com'], dns);
    expect(t).toMatchObject({ hostname: 'api.example.com', port: 8443, address: '93.184.216.34', family: 4 });
  });

  it('enforces the port of a host:port entry', async () => {
    await expect(checkEgress('https://api.example.com/x', ['api.example.com:8443'], dns)).rejects.toMatchObject({
      code: 'EGRESS_DENIED',
    });
    await expect(checkEgress('http://api.example.com:8443/x', ['api.example.com:8443'], dns)).resolves.toMatchObject({
      port: 8443,
    });
  });

  it('matches *.suffix against subdomains only', async () => {
    await expect(checkEgress('https://a.b.example.com/', ['*.example.com'], dns)).resolves.toMatchObject({
      address: '93.184.216.35',
    });
    await expect(checkEgress('https://example.com/', ['*.example.com'], dns)).rejects.toMatchObject({
      code: 'EGRESS_DENIED',
    });
    await expect(checkEgress('https://evilexample.com/', ['*.example.com'], dns)).rejects.toMatchObject({
      code: 'EGRESS_DENIED',
    });
  });

  it('refuses a listed name that resolves to a private, metadata, unique-local or mapped loopback address', async () => {
    for (const host of ['rebind.example.com', 'metadata.example.com', 'v6.example.com', 'mapped.example.com']) {
      await expect(checkEgress(`http://${host}/`, [host, '*.example.com'], dns)).rejects.toMatchObject({
        code: 'EGRESS_DENIED',
      });
    }
  });

  it('refuses every special literal when the operator lists no range, even one the entry names', async () => {
    const strict = egressPolicy([], answers);
    for (const [url, entry] of [
      ['http://127.0.0.1:5432/', '127.0.0.1:5432'],
      ['http://10.0.0.5/', '10.0.0.5'],
      ['http://[::1]:80/', '[::1]'],
      ['http://169.254.169.254/', '169.254.169.254'],
    ])
      await expect(checkEgress(url, [entry], strict)).rejects.toMatchObject({
        code: 'EGRESS_DENIED',
        message: expect.stringContaining('ORDO_EGRESS_ALLOW_PRIVATE'),
      });
  });

  it('lets an entry naming a literal reach it only inside the ranges the operator lists', async () => {
    const tenNet = egressPolicy(['10.1.0.0/16'], answers);
    await expect(checkEgress('http://10.1.2.3/', ['10.1.2.3'], tenNet)).resolves.toMatchObject({ address: '10.1.2.3' });
    await expect(checkEgress('http://10.2.0.1/', ['10.2.0.1'], tenNet)).rejects.toMatchObject({
      code: 'EGRESS_DENIED',
    });
    await expect(checkEgress('http://127.0.0.1/', ['127.0.0.1'], tenNet)).rejects.toMatchObject({
      code: 'EGRESS_DENIED',
    });
  });

  it('refuses an operator range that covers link-local addresses (cloud metadata)', () => {
    for (const range of ['169.254.169.254', '169.254.0.0/16', '169.0.0.0/8', '0.0.0.0/0', 'fe80::1', '::/0'])
      expect(() => egressPolicy([range])).toThrow(/link-local/);
    for (const range of ['not-an-ip', '10.0.0.0/33', '10.0.0.0/'])
      expect(() => egressPolicy([range])).toThrow(/not an IP address or a CIDR range/);
    expect(() => egressPolicy(['10.0.0.0/8', '172.16.0.0/12', 'fd00::/8', '127.0.0.1'])).not.toThrow();
  });

  it('refuses private literals unless the entry names that literal', async () => {
    await expect(checkEgress('http://169.254.169.254/latest/meta-data', ['*.254'], dns)).rejects.toMatchObject({
      code: 'EGRESS_DENIED',
    });
    await expect(checkEgress('http://127.0.0.1:8080/', ['127.0.0.1:9090'], dns)).rejects.toMatchObject({
      code: 'EGRESS_DENIED',
    });
    await expect(checkEgress('http://[::ffff:127.0.0.1]:8080/', ['127.0.0.1:8080'], dns)).rejects.toMatchObject({
      code: 'EGRESS_DENIED',
    });
    await expect(checkEgress('http://2130706433:8080/', ['127.0.0.1:8080'], dns)).resolves.toMatchObject({
      address: '127.0.0.1',
    });
    await expect(checkEgress('http://[::1]:80/', ['[::1]'], dns)).resolves.toMatchObject({ address: '::1', family: 6 });
  });

  it('refuses non-http schemes, credentials in URLs and unresolvable names', async () => {
    await expect(checkEgress('file:///etc/passwd', ['*.example.com'], dns)).rejects.toMatchObject({
      code: 'EGRESS_DENIED',
    });
    await expect(checkEgress('http://u:p@api.example.com/', ['api.example.com'], dns)).rejects.toMatchObject({
      code: 'EGRESS_DENIED',
    });
    await expect(checkEgress('http://nx.example.com/', ['*.example.com'], dns)).rejects.toMatchObject({
      code: 'EGRESS_DENIED',
    });
  });
});

describe('pinned connections and redirects', () => {
  let server: http.Server;
  let other: http.Server;
  let port = 0;
  let otherPort = 0;
  let hits: string[] = [];

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      hits.push(`${req.headers.host} ${req.url}`);
      if (req.url === '/to-other') res.writeHead(302, { location: `http://127.0.0.1:${otherPort}/` }).end();
      else if (req.url === '/to-metadata')
        res.writeHead(301, { location: 'http://169.254.169.254/latest/meta-data/' }).end();
      else if (req.url === '/loop') res.writeHead(302, { location: '/loop' }).end();
      else if (req.url?.startsWith('/hop/')) {
        const n = Number(req.url.slice(5));
        if (n > 0) res.writeHead(307, { location: `/hop/${n - 1}` }).end();
        else res.end(`landed; auth=${req.headers.authorization ?? 'none'}`);
      } else res.end('ok');
    });
    other = http.createServer((req, res) => res.end(`other; auth=${req.headers.authorization ?? 'none'}`));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
    otherPort = (other.address() as AddressInfo).port;
  });
  afterAll(async () => {
    await new Promise((r) => server.close(r));
    await new Promise((r) => other.close(r));
  });
  beforeEach(() => (hits = []));

  it('connects to the pinned address whatever name the request carries (no second DNS answer is used)', async () => {
    const body = await new Promise<string>((resolve, reject) => {
      http
        .get(
          {
            host: 'never-resolves.invalid',
            port,
            path: '/pinned',
            lookup: pinnedLookup({ address: '127.0.0.1', family: 4 }),
            agent: false,
          },
          (res) => {
            let s = '';
            res.on('data', (c: Buffer) => (s += c.toString()));
            res.on('end', () => resolve(s));
          },
        )
        .on('error', reject);
    });
    expect(body).toBe('ok');
    expect(hits).toEqual([`never-resolves.invalid:${port} /pinned`]);
  });

  const req = (path: string, egress: string[], extra: Partial<Parameters<typeof egressRequest>[0]> = {}) =>
    egressRequest({
      method: 'GET',
      url: `http://127.0.0.1:${port}${path}`,
      headers: { authorization: 'Bearer t' },
      egress,
      signal: new AbortController().signal,
      timeoutMs: 5000,
      maxResponseBytes: 1024,
      policy: egressPolicy(['127.0.0.1']),
      ...extra,
    });

  it('follows redirects within the egress list and keeps credentials on the same origin', async () => {
    const res = await req('/hop/3', [`127.0.0.1:${port}`]);
    expect(res.body.toString()).toBe('landed; auth=Bearer t');
    expect(hits).toHaveLength(4);
  });

  it('refuses a loopback server the operator did not list', async () => {
    await expect(req('/hop/0', [`127.0.0.1:${port}`], { policy: egressPolicy([]) })).rejects.toMatchObject({
      code: 'EGRESS_DENIED',
    });
  });

  it('re-checks every redirect hop: a hop to a host outside the list is denied', async () => {
    await expect(req('/to-other', [`127.0.0.1:${port}`])).rejects.toMatchObject({
      code: 'EGRESS_DENIED',
      retryable: false,
    });
    await expect(req('/to-metadata', [`127.0.0.1:${port}`, '*.254'])).rejects.toMatchObject({ code: 'EGRESS_DENIED' });
  });

  it('drops credentials when a redirect changes origin', async () => {
    const res = await req('/to-other', [`127.0.0.1:${port}`, `127.0.0.1:${otherPort}`]);
    expect(res.body.toString()).toBe('other; auth=none');
  });

  it('gives up after 5 redirects', async () => {
    await expect(req('/loop', [`127.0.0.1:${port}`])).rejects.toMatchObject({ code: 'TOO_MANY_REDIRECTS' });
    expect(hits).toHaveLength(6);
  });
});
