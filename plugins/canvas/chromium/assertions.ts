import type { Page } from 'playwright-core';
import type { Assertion } from './params.ts';

/** One assertion's outcome, as the node's `results` output lists it. */
export interface AssertionResult {
  assertion: Assertion;
  passed: boolean;
  /** What the page had: its status, `visible`/`hidden`/`absent` for a selector, its title. */
  actual?: number | string;
  /** Why the assertion could not be checked (an invalid selector). */
  error?: string;
}

/**
 * Checks each assertion once, against the page as it is (loaded as `waitUntil` said): nothing waits
 * for an element to appear. Selectors and text are read in Playwright's isolated world, so the
 * page's own scripts cannot change how they are evaluated.
 */
export async function checkAssertions(
  page: Page,
  status: number,
  assertions: readonly Assertion[],
): Promise<AssertionResult[]> {
  const results: AssertionResult[] = [];
  for (const assertion of assertions) results.push(await checkOne(page, status, assertion));
  return results;
}

async function checkOne(page: Page, status: number, assertion: Assertion): Promise<AssertionResult> {
  if ('status' in assertion) return { assertion, passed: status === assertion.status, actual: status };
  if ('selector' in assertion) {
    const locator = page.locator(`css=${assertion.selector}`);
    try {
      const state =
        (await locator.visible().count()) > 0 ? 'visible' : (await locator.count()) > 0 ? 'hidden' : 'absent';
      return { assertion, passed: (state === 'visible') === assertion.visible, actual: state };
    } catch (error) {
      return { assertion, passed: false, error: firstLine(error) };
    }
  }
  if ('text' in assertion) {
    const texts = await page.locator('body').allInnerTexts();
    return { assertion, passed: texts.some((text) => text.includes(assertion.text)) };
  }
  const title = await page.title();
  return { assertion, passed: title === assertion.title, actual: title.slice(0, 1_000) };
}

const firstLine = (error: unknown) =>
  (error instanceof Error ? error.message : String(error)).split('\n')[0]?.slice(0, 500) ?? '';
