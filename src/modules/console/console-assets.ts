import fs from 'node:fs';
import path from 'node:path';

export interface ConsoleFile {
  body: Buffer;
  contentType: string;
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
  '.woff2': 'font/woff2',
};

/**
 * The built console (`npm run build` writes it to dist/web): index.html and the files under assets/,
 * read once into memory. The asset names carry a hash of their content, so a name never changes
 * meaning; only index.html names the current ones.
 */
export class ConsoleAssets {
  private constructor(
    readonly index: Buffer,
    private readonly assets: ReadonlyMap<string, ConsoleFile>,
  ) {}

  /** The console under `dir`, or null when it has not been built there. */
  static load(dir: string): ConsoleAssets | null {
    const indexPath = path.join(dir, 'index.html');
    if (!fs.existsSync(indexPath)) return null;
    const assets = new Map<string, ConsoleFile>();
    const assetsDir = path.join(dir, 'assets');
    if (fs.existsSync(assetsDir)) {
      for (const name of fs.readdirSync(assetsDir)) {
        const file = path.join(assetsDir, name);
        if (!fs.statSync(file).isFile()) continue;
        const contentType = TYPES[path.extname(name)] ?? 'application/octet-stream';
        assets.set(name, { body: fs.readFileSync(file), contentType });
      }
    }
    return new ConsoleAssets(fs.readFileSync(indexPath), assets);
  }

  /** A file of assets/ by its exact name (no path: a name with a slash is never in the map). */
  asset(name: string): ConsoleFile | undefined {
    return this.assets.get(name);
  }
}
