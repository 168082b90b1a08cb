import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll } from 'vitest';
import { launchBrowser, openPage } from './browser.js';

/** A browser page for a dashboard test file (see `dashboardPageForFile`). */
export interface DashboardPage {
  browser: Browser;
  page: Page;
  /** The page's console errors and uncaught exceptions so far. */
  errors: string[];
}

/**
 * The way the dashboard e2e files begin: a beforeAll that launches the browser and opens a page,
 * an afterAll that closes it. Call it after `serverForFile`: its hooks then run after the
 * server's start and before its stop.
 */
export function dashboardPageForFile(): DashboardPage {
  const d = {} as DashboardPage;
  beforeAll(async () => {
    d.browser = await launchBrowser();
    Object.assign(d, await openPage(d.browser));
  }, 60_000);
  afterAll(async () => {
    await d.browser?.close();
  });
  return d;
}
