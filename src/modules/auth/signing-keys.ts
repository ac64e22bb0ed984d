import fs from 'node:fs';
import path from 'node:path';
import { calculateJwkThumbprint, exportJWK, generateKeyPair, importJWK, type JWK, type CryptoKey } from 'jose';
import { readSecretJson, writeSecretJson } from '../../core/home/secret-file';

interface StoredKey {
  kid: string;
  createdAt: string;
  publicJwk: JWK;
  privateJwk: JWK;
}

interface KeyFile {
  active: string;
  keys: StoredKey[];
}

export interface LoadedKey {
  kid: string;
  createdAt: string;
  publicJwk: JWK;
  publicKey: CryptoKey;
  privateKey: CryptoKey;
}

export const KEY_FILE = 'signing-keys.json';

/** Where the instance keeps its signing keys: ORDO_SIGNING_KEYS_DIR, else `<ORDO_HOME>/keys`. */
export function signingKeysDir(config: { ORDO_SIGNING_KEYS_DIR?: string; home: string }): string {
  return config.ORDO_SIGNING_KEYS_DIR ?? path.join(config.home, 'keys');
}

/**
 * The instance's Ed25519 signing keys (tokens, export manifests). Kept in a 0600 file outside the
 * database, so the application's SQL roles cannot read them. Every key has a `kid` (its JWK
 * thumbprint); rotation adds a key and makes it active while older keys keep verifying.
 */
export class SigningKeys {
  private keys = new Map<string, LoadedKey>();
  private activeKid = '';
  private lastReload = 0;

  private constructor(private readonly file: string) {}

  static async open(dir: string, opts: { create: boolean }): Promise<SigningKeys> {
    const ks = new SigningKeys(path.join(dir, KEY_FILE));
    if (!fs.existsSync(ks.file)) {
      if (!opts.create) throw new Error(`no signing keys at ${ks.file}`);
      await ks.rotate();
    }
    await ks.reload();
    return ks;
  }

  get active(): LoadedKey {
    const k = this.keys.get(this.activeKid);
    if (!k) throw new Error('no active signing key');
    return k;
  }

  /** Finds a verification key; re-reads the file (at most once a second) for a kid rotated in elsewhere. */
  async find(kid: string): Promise<LoadedKey | undefined> {
    const k = this.keys.get(kid);
    if (k) return k;
    if (Date.now() - this.lastReload > 1000) await this.reload();
    return this.keys.get(kid);
  }

  publicJwks(): { keys: JWK[] } {
    return { keys: [...this.keys.values()].map((k) => ({ ...k.publicJwk, kid: k.kid, alg: 'EdDSA', use: 'sig' })) };
  }

  /** Generates a new key pair and makes it the active signing key. */
  async rotate(): Promise<string> {
    const { publicKey, privateKey } = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
    const publicJwk = await exportJWK(publicKey);
    const privateJwk = await exportJWK(privateKey);
    const kid = await calculateJwkThumbprint(publicJwk);
    const current = readSecretJson<KeyFile>(this.file) ?? { active: kid, keys: [] };
    current.keys.push({ kid, createdAt: new Date().toISOString(), publicJwk, privateJwk });
    current.active = kid;
    writeSecretJson(this.file, current);
    await this.reload();
    return kid;
  }

  /** Removes a non-active key: tokens it signed stop verifying. */
  async retire(kid: string): Promise<void> {
    const current = readSecretJson<KeyFile>(this.file);
    if (!current) throw new Error('no key file');
    if (current.active === kid) throw new Error('cannot retire the active key; rotate first');
    const before = current.keys.length;
    current.keys = current.keys.filter((k) => k.kid !== kid);
    if (current.keys.length === before) throw new Error(`no key with kid ${kid}`);
    writeSecretJson(this.file, current);
    await this.reload();
  }

  list(): { kid: string; createdAt: string; active: boolean }[] {
    return [...this.keys.values()].map((k) => ({
      kid: k.kid,
      createdAt: k.createdAt,
      active: k.kid === this.activeKid,
    }));
  }

  private async reload(): Promise<void> {
    this.lastReload = Date.now();
    const stat = fs.statSync(this.file);
    if ((stat.mode & 0o077) !== 0) fs.chmodSync(this.file, 0o600);
    const data = readSecretJson<KeyFile>(this.file);
    if (!data) throw new Error(`cannot read ${this.file}`);
    const next = new Map<string, LoadedKey>();
    for (const k of data.keys) {
      next.set(k.kid, {
        kid: k.kid,
        createdAt: k.createdAt,
        publicJwk: k.publicJwk,
        publicKey: (await importJWK(k.publicJwk, 'EdDSA')) as CryptoKey,
        privateKey: (await importJWK(k.privateJwk, 'EdDSA')) as CryptoKey,
      });
    }
    this.keys = next;
    this.activeKid = data.active;
  }
}
