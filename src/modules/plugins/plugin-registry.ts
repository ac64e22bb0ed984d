import { Injectable } from '@nestjs/common';
import fs from 'node:fs';
import path from 'node:path';
import type { Plugin } from './plugin';

/**
 * The built-in plugins: every directory under `plugins/` with an index module whose default
 * export is a Plugin. Adding a plugin is adding a directory; nothing else is edited.
 */
@Injectable()
export class PluginRegistry {
  private readonly plugins = new Map<string, Plugin>();

  constructor() {
    for (const p of loadBuiltInPlugins()) this.register(p);
  }

  register(p: Plugin): void {
    if (this.plugins.has(p.name)) throw new Error(`plugin ${p.name} registered twice`);
    this.plugins.set(p.name, p);
  }

  get(name: string): Plugin | undefined {
    return this.plugins.get(name);
  }

  names(): string[] {
    return [...this.plugins.keys()].sort();
  }
}

/** Finds `plugins/<name>/index.{js,ts}` beside the running code (the compiled tree's plugins/ when built). */
export function loadBuiltInPlugins(): Plugin[] {
  const compiled = __filename.endsWith('.js');
  // src/modules/plugins → plugins, in the source tree and in any compiled output alike.
  const dir = path.resolve(__dirname, '..', '..', '..', 'plugins');
  const ext = compiled ? '.js' : '.ts';
  const out: Plugin[] = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    if (!entry.isDirectory()) continue;
    const index = path.join(dir, entry.name, `index${ext}`);
    if (!fs.existsSync(index)) continue;
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const mod = require(index) as { default?: Plugin };
    if (!mod.default || typeof mod.default.execute !== 'function')
      throw new Error(`${index} has no default Plugin export`);
    if (mod.default.name !== entry.name)
      throw new Error(`plugin in plugins/${entry.name} is named ${mod.default.name}`);
    out.push(mod.default);
  }
  return out;
}
