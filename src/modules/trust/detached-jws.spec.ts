import { CompactSign, importJWK, type CryptoKey, type JWK } from 'jose';
import {
  DetachedJwsError,
  generateSigningKeyPair,
  parseDetached,
  signDetached,
  verifyDetachedWith,
} from './detached-jws';

const payload = Buffer.from('{"a":1}\n');

describe('detached JWS (RFC 7515 Appendix F, b64: false)', () => {
  it('signs with an empty payload segment and a b64:false EdDSA header naming the kid', async () => {
    const { privateJwk, publicJwk } = await generateSigningKeyPair('k1');
    const jws = await signDetached(payload, privateJwk);
    const [h, p, s] = jws.split('.');
    expect(p).toBe('');
    expect(s.length).toBeGreaterThan(0);
    expect(JSON.parse(Buffer.from(h, 'base64url').toString())).toEqual({
      alg: 'EdDSA',
      kid: 'k1',
      b64: false,
      crit: ['b64'],
    });
    await expect(verifyDetachedWith(payload, jws, publicJwk)).resolves.toEqual({ alg: 'EdDSA', kid: 'k1' });
  });

  it('defaults the kid to the RFC 7638 thumbprint and never exports the private part in the public JWK', async () => {
    const { privateJwk, publicJwk } = await generateSigningKeyPair();
    expect(privateJwk.kid).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(publicJwk).not.toHaveProperty('d');
  });

  it('refuses one changed payload byte', async () => {
    const { privateJwk, publicJwk } = await generateSigningKeyPair('k1');
    const jws = await signDetached(payload, privateJwk);
    const changed = Buffer.from(payload);
    changed[2] ^= 1;
    await expect(verifyDetachedWith(changed, jws, publicJwk)).rejects.toBeInstanceOf(DetachedJwsError);
  });

  it('refuses an attached (non-detached) JWS and one without b64:false', async () => {
    const { privateJwk } = await generateSigningKeyPair('k1');
    const key = (await importJWK(privateJwk as JWK, 'EdDSA')) as CryptoKey;
    const attached = await new CompactSign(payload).setProtectedHeader({ alg: 'EdDSA', kid: 'k1' }).sign(key);
    expect(() => parseDetached(attached)).toThrow(DetachedJwsError);
    const [h, , s] = attached.split('.');
    expect(() => parseDetached(`${h}..${s}`)).toThrow(/b64: false/);
  });

  it('refuses alg none and HMAC headers', () => {
    for (const alg of ['none', 'HS256']) {
      const h = Buffer.from(JSON.stringify({ alg, kid: 'k1', b64: false, crit: ['b64'] })).toString('base64url');
      expect(() => parseDetached(`${h}..AAAA`)).toThrow(DetachedJwsError);
    }
  });
});
