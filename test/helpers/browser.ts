import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { ROOT } from './leoflow-process.js';

/** Debian's Chromium (.ci/run installs it); playwright-core drives it, having no browser of its own. */
export const CHROMIUM = process.env.LEOFLOW_CHROMIUM ?? '/usr/bin/chromium';

/** Where the dashboard tests save each page's screenshot (gitignored), to be looked at. */
export const SCREENSHOTS = path.join(ROOT, 'test/e2e/screenshots');

/**
 * Headless Chromium with a new profile of its own (playwright's launch makes a temporary one) and
 * nothing that reaches the network by itself. Close it in afterAll: it is a process tree.
 */
export async function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    timeout: 30_000,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/** A page at 1280×800 whose script errors fail the test that reads `errors`. */
export async function openPage(browser: Browser): Promise<{ page: Page; errors: string[] }> {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.setDefaultTimeout(20_000);
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  return { page, errors };
}

/** Saves the page as `name`.png at 1280×800 and `name`-800.png at 800 px wide. */
export async function screenshots(page: Page, name: string): Promise<void> {
  mkdirSync(SCREENSHOTS, { recursive: true });
  const size = page.viewportSize() ?? { width: 1280, height: 800 };
  await page.screenshot({ path: path.join(SCREENSHOTS, `${name}.png`) });
  await page.setViewportSize({ width: 800, height: 800 });
  await page.screenshot({ path: path.join(SCREENSHOTS, `${name}-800.png`) });
  await page.setViewportSize(size);
}
