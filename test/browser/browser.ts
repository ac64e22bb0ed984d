import AxeBuilder from '@axe-core/playwright';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';

/** Debian's Chromium (package chromium); Playwright's own browser download cannot run here. */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/**
 * Headless Chromium with the flags that keep it off the network it cannot reach (background
 * networking, component updates, sync); Playwright gives each launch a fresh profile directory.
 */
export async function launchChromium(): Promise<Browser> {
  if (!fs.existsSync(CHROMIUM)) {
    throw new Error(`no Chromium at ${CHROMIUM}: install it (apt-get install -y chromium) or set CHROMIUM_PATH`);
  }
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/** axe-core's violations of impact serious or critical on the page as it is now, as readable lines. */
export async function seriousViolations(page: Page): Promise<string[]> {
  const result = await new AxeBuilder({ page }).analyze();
  return result.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${String(v.impact)}): ${v.help} at ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
}

/**
 * A screenshot of the page: into docs/images/ (the pictures of docs/console.md) when
 * ORDO_DOCS_SCREENSHOTS=1, else into a temporary directory, so that a test run leaves the tree as it was.
 */
export async function screenshot(page: Page, name: string): Promise<void> {
  const dir =
    process.env.ORDO_DOCS_SCREENSHOTS === '1'
      ? path.resolve(__dirname, '..', '..', 'docs', 'images')
      : path.join(os.tmpdir(), 'ordo-console-screenshots');
  fs.mkdirSync(dir, { recursive: true });
  await page.screenshot({ path: path.join(dir, `console-${name}.png`), fullPage: false });
}
