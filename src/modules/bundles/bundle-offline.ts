import fs from 'node:fs/promises';
import path from 'node:path';
import { projectRoot } from '../../core/home/project-root';
import { BundleError } from './bundle-format';
import { readBundle, type ReadBundle } from './bundle-reader';
import {
  DetachedJwsError,
  ed25519PrivateJwk,
  ed25519PublicJwk,
  generateSigningKeyPair,
  parseDetached,
  signDetached,
  verifyDetachedWith,
  type Ed25519PrivateJwk,
  type Ed25519PublicJwk,
} from '../trust/detached-jws';

/**
 * The kids of the example key pair shipped in bundles/example/keys: published on purpose, so a
 * walkthrough can trust it; a key of one's own must not reuse its kid.
 */
export async function exampleKeyKids(): Promise<string[]> {
  const dir = path.join(projectRoot(), 'bundles', 'example', 'keys');
  const names = await fs.readdir(dir).catch(() => [] as string[]);
  const kids: string[] = [];
  for (const n of names.filter((f) => f.endsWith('.public.jwk'))) {
    const jwk = JSON.parse(await fs.readFile(path.join(dir, n), 'utf8')) as { kid?: unknown };
    if (typeof jwk.kid === 'string') kids.push(jwk.kid);
  }
  return kids;
}

/** Writes a fresh Ed25519 key pair: `<kid>.private.jwk` (mode 0600) and `<kid>.public.jwk`; never overwrites. */
export async function keygen(
  outDir: string,
  kid?: string,
): Promise<{ kid: string; privateFile: string; publicFile: string }> {
  const { privateJwk, publicJwk } = await generateSigningKeyPair(kid);
  await fs.mkdir(outDir, { recursive: true, mode: 0o700 });
  const privateFile = `${outDir}/${privateJwk.kid}.private.jwk`;
  const publicFile = `${outDir}/${privateJwk.kid}.public.jwk`;
  for (const f of [privateFile, publicFile]) {
    if (
      await fs.stat(f).then(
        () => true,
        () => false,
      )
    )
      throw new BundleError(
        'BUNDLE_KEY_EXISTS',
        `${f} exists: keygen never overwrites a key; choose another --kid or --out`,
      );
  }
  await fs.writeFile(privateFile, `${JSON.stringify(privateJwk, null, 2)}\n`, { mode: 0o600, flag: 'wx' });
  await fs.chmod(privateFile, 0o600);
  await fs.writeFile(publicFile, `${JSON.stringify(publicJwk, null, 2)}\n`, { mode: 0o644, flag: 'wx' });
  return { kid: privateJwk.kid, privateFile, publicFile };
}

export async function readPrivateJwk(file: string): Promise<Ed25519PrivateJwk> {
  const r = ed25519PrivateJwk.safeParse(JSON.parse(await fs.readFile(file, 'utf8')));
  if (!r.success) throw new BundleError('BUNDLE_KEY_INVALID', `${file} is not an Ed25519 private JWK with a kid`);
  return r.data;
}

export async function readPublicJwk(file: string): Promise<Ed25519PublicJwk> {
  const raw = JSON.parse(await fs.readFile(file, 'utf8')) as Record<string, unknown>;
  const r = ed25519PublicJwk.safeParse({
    kty: raw.kty,
    crv: raw.crv,
    x: raw.x,
    kid: raw.kid,
    alg: raw.alg,
    use: raw.use,
  });
  if (!r.success) throw new BundleError('BUNDLE_KEY_INVALID', `${file} is not an Ed25519 public JWK`);
  return r.data;
}

/**
 * Signs a bundle archive: checks its structure, then returns the detached JWS over its manifest
 * bytes (what `<bundle>.sig` holds).
 */
export async function signBundle(
  tarball: Uint8Array,
  privateJwk: Ed25519PrivateJwk,
): Promise<{ signature: string; bundle: ReadBundle }> {
  const bundle = await readBundle(tarball);
  return { signature: await signDetached(bundle.manifestBytes, privateJwk), bundle };
}

/**
 * Offline verification with one public key, no database: the signature over the manifest, the
 * kid (when the JWK names one), every path rule, every size and hash.
 */
export async function verifyBundleOffline(
  tarball: Uint8Array,
  signature: string,
  publicJwk: Ed25519PublicJwk,
): Promise<ReadBundle & { kid: string }> {
  let kid = '';
  const bundle = await readBundle(tarball, {
    onManifest: async (bytes) => {
      try {
        kid = parseDetached(signature).header.kid;
        if (publicJwk.kid !== undefined && publicJwk.kid !== kid) {
          throw new BundleError(
            'BUNDLE_KEY_UNTRUSTED',
            `the bundle is signed by key ${kid}, not ${publicJwk.kid}`,
            422,
          );
        }
        await verifyDetachedWith(bytes, signature, publicJwk);
      } catch (e) {
        if (e instanceof DetachedJwsError) {
          // Ed25519 signatures do not name their key: changed content and another key under the
          // same kid fail alike.
          const message = kid
            ? `the signature does not verify with the given public key for kid ${kid}: either the signed content changed after signing, or it was signed by a different key that reuses the kid ${kid}`
            : e.message;
          throw new BundleError('BUNDLE_SIGNATURE_INVALID', message, 422);
        }
        throw e;
      }
    },
  });
  return { ...bundle, kid };
}
