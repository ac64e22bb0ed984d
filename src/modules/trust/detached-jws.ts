import {
  calculateJwkThumbprint,
  exportJWK,
  FlattenedSign,
  flattenedVerify,
  generateKeyPair,
  importJWK,
  type CryptoKey,
  type JWK,
} from 'jose';
import { z } from 'zod';

/**
 * Detached signatures used by Ordo for bundles and DAG versions.
 *
 * Form: a JWS compact serialization with an empty payload segment (`<protected>..<signature>`,
 * RFC 7515 Appendix F) whose protected header is `{"alg":"EdDSA","kid":…,"b64":false,"crit":["b64"]}`
 * (RFC 7797): the signature covers the payload bytes as they are, not their base64url form, so the
 * verifier needs the exact bytes (a bundle's `manifest.json`, or a DAG's RFC 8785 canonical JSON).
 * Ed25519 only.
 */
export const DETACHED_JWS_ALG = 'EdDSA';

const KID = /^[A-Za-z0-9._:-]{1,128}$/;
const B64URL_32 = /^[A-Za-z0-9_-]{43}$/;

/** A public Ed25519 JWK as accepted by the trust store: never with a private part. */
export const ed25519PublicJwk = z
  .strictObject({
    kty: z.literal('OKP'),
    crv: z.literal('Ed25519'),
    x: z.string().regex(B64URL_32, 'the base64url Ed25519 public key (32 bytes)'),
    kid: z.string().regex(KID).optional(),
    alg: z.literal('EdDSA').optional(),
    use: z.literal('sig').optional(),
  })
  .meta({ id: 'Ed25519PublicJwk' });

export type Ed25519PublicJwk = z.infer<typeof ed25519PublicJwk>;

export const ed25519PrivateJwk = z.object({
  kty: z.literal('OKP'),
  crv: z.literal('Ed25519'),
  x: z.string().regex(B64URL_32),
  d: z.string().regex(B64URL_32),
  kid: z.string().regex(KID),
});
export type Ed25519PrivateJwk = z.infer<typeof ed25519PrivateJwk>;

export const kidSchema = z.string().regex(KID, 'letters, digits, . _ : and -, at most 128');

/** A fresh Ed25519 key pair as JWKs; `kid` defaults to the RFC 7638 thumbprint of the public key. */
export async function generateSigningKeyPair(
  kid?: string,
): Promise<{ privateJwk: Ed25519PrivateJwk; publicJwk: Ed25519PublicJwk }> {
  const { publicKey, privateKey } = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
  const pub = await exportJWK(publicKey);
  const priv = await exportJWK(privateKey);
  const id = kid ?? (await calculateJwkThumbprint(pub, 'sha256'));
  return {
    privateJwk: ed25519PrivateJwk.parse({ ...priv, kid: id }),
    publicJwk: ed25519PublicJwk.parse({ kty: 'OKP', crv: 'Ed25519', x: pub.x, kid: id, alg: 'EdDSA', use: 'sig' }),
  };
}

/** Signs `payload` with an Ed25519 private JWK; returns the compact detached JWS. */
export async function signDetached(payload: Uint8Array, privateJwk: Ed25519PrivateJwk): Promise<string> {
  const key = (await importJWK(privateJwk as JWK, DETACHED_JWS_ALG)) as CryptoKey;
  const jws = await new FlattenedSign(payload)
    .setProtectedHeader({ alg: DETACHED_JWS_ALG, kid: privateJwk.kid, b64: false, crit: ['b64'] })
    .sign(key);
  return `${jws.protected}..${jws.signature}`;
}

export interface DetachedHeader {
  alg: string;
  kid: string;
}

export class DetachedJwsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DetachedJwsError';
  }
}

const COMPACT_DETACHED = /^([A-Za-z0-9_-]+)\.\.([A-Za-z0-9_-]+)$/;
const headerSchema = z.object({
  alg: z.literal(DETACHED_JWS_ALG),
  kid: z.string().regex(KID),
  b64: z.literal(false),
  crit: z.array(z.string()).refine((c) => c.length === 1 && c[0] === 'b64', 'crit must be ["b64"]'),
});

/** Reads the protected header of a compact detached JWS without verifying it. */
export function parseDetached(jws: string): { header: DetachedHeader; protected: string; signature: string } {
  const m = COMPACT_DETACHED.exec(jws.trim());
  if (!m) throw new DetachedJwsError('not a compact detached JWS (<header>..<signature>)');
  let raw: unknown;
  try {
    raw = JSON.parse(Buffer.from(m[1], 'base64url').toString('utf8'));
  } catch {
    throw new DetachedJwsError('the JWS protected header is not JSON');
  }
  const h = headerSchema.safeParse(raw);
  if (!h.success) throw new DetachedJwsError(`the JWS header must be {alg: EdDSA, kid, b64: false, crit: ["b64"]}`);
  return { header: { alg: h.data.alg, kid: h.data.kid }, protected: m[1], signature: m[2] };
}

/** Verifies a compact detached JWS over `payload` with a public JWK; throws DetachedJwsError when it does not hold. */
export async function verifyDetachedWith(
  payload: Uint8Array,
  jws: string,
  publicJwk: Ed25519PublicJwk,
): Promise<DetachedHeader> {
  const parsed = parseDetached(jws);
  const jwk: JWK = { kty: 'OKP', crv: 'Ed25519', x: publicJwk.x };
  const key = (await importJWK(jwk, DETACHED_JWS_ALG)) as CryptoKey;
  try {
    await flattenedVerify({ protected: parsed.protected, payload, signature: parsed.signature }, key, {
      algorithms: [DETACHED_JWS_ALG],
    });
  } catch {
    throw new DetachedJwsError('the signature does not match the signed content');
  }
  return parsed.header;
}
