import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

export const SECRET_KEY_FILE = 'secrets-key.json';

interface KeyFile {
  active: string;
  keys: { kid: string; createdAt: string; key: string }[];
}

export interface Sealed {
  keyId: string;
  nonce: Buffer;
  /** Ciphertext followed by the 16-byte GCM tag. */
  ciphertext: Buffer;
}

/**
 * The instance's secret-encryption keys (AES-256-GCM), kept in a 0600 JSON file in the keys
 * directory, never in the database: a database dump alone does not reveal a secret. Every replica
 * needs the same file (like the signing keys). The file is created on first use, exclusively, so
 * two processes starting together agree on one key. Older keys stay for decryption after rotation.
 */
export class SecretKeys {
  private constructor(
    private readonly file: string,
    private data: KeyFile,
  ) {}

  static open(dir: string): SecretKeys {
    const file = path.join(dir, SECRET_KEY_FILE);
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    if (!fs.existsSync(file)) {
      const fresh: KeyFile = { active: '', keys: [] };
      const kid = newKid();
      fresh.keys.push({ kid, createdAt: new Date().toISOString(), key: randomBytes(32).toString('base64') });
      fresh.active = kid;
      try {
        fs.writeFileSync(file, JSON.stringify(fresh, null, 2) + '\n', { mode: 0o600, flag: 'wx' });
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      }
    }
    fs.chmodSync(file, 0o600);
    return new SecretKeys(file, read(file));
  }

  get activeKid(): string {
    return this.data.active;
  }

  seal(plaintext: string, aad: Buffer): Sealed {
    const kid = this.data.active;
    const nonce = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.key(kid), nonce);
    cipher.setAAD(aad);
    const ciphertext = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final(), cipher.getAuthTag()]);
    return { keyId: kid, nonce, ciphertext };
  }

  /** Throws when the key is unknown or the ciphertext, nonce or additional data do not authenticate. */
  open(sealed: Sealed, aad: Buffer): string {
    const decipher = createDecipheriv('aes-256-gcm', this.key(sealed.keyId), sealed.nonce);
    decipher.setAAD(aad);
    decipher.setAuthTag(sealed.ciphertext.subarray(sealed.ciphertext.length - 16));
    return Buffer.concat([
      decipher.update(sealed.ciphertext.subarray(0, sealed.ciphertext.length - 16)),
      decipher.final(),
    ]).toString('utf8');
  }

  private key(kid: string): Buffer {
    let k = this.data.keys.find((x) => x.kid === kid);
    if (!k) {
      // Rotated in by another process since we read the file.
      this.data = read(this.file);
      k = this.data.keys.find((x) => x.kid === kid);
    }
    if (!k) throw new Error(`secret key ${kid} is not in ${this.file}`);
    return Buffer.from(k.key, 'base64');
  }
}

function newKid(): string {
  return `sk-${randomBytes(8).toString('hex')}`;
}

function read(file: string): KeyFile {
  const data = JSON.parse(fs.readFileSync(file, 'utf8')) as KeyFile;
  const active = data.keys.find((k) => k.kid === data.active);
  if (!active || Buffer.from(active.key, 'base64').length !== 32)
    throw new Error(`${file} holds no valid active AES-256 key`);
  return data;
}
