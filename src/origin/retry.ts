/**
 * The arithmetic of retrying an origin request: how long to wait before attempt N, given the
 * server's `Retry-After` header if it sent one. Pure: the caller passes in the current time and a
 * random number, so the same inputs always give the same delay and tests need no clock.
 *
 * Without `Retry-After` the delay is "full jitter" exponential backoff: a uniform pick in
 * [0, min(maxMs, baseMs * 2^(attempt - 1))). Full jitter spreads a herd of clients that all failed at
 * once, instead of having them return in lockstep. With `Retry-After` the server knows best, so its
 * value is used as is, capped so a hostile or confused server cannot park us for hours.
 *
 * Retries of one call stop when its time budget is spent (an origin outage is waited out for that
 * long, 60 s by default, then fails clearly): the last wait is cut to what is left of the budget.
 * An origin that has never answered and cannot be reached gets a much shorter budget (first contact).
 */

/** How long a call keeps retrying an origin that fails transiently (`--origin-retry-s`). */
export const RETRY_BUDGET_MS_DEFAULT = 60_000;

/**
 * How long a call keeps trying an origin that has not answered once in this process while nothing
 * answers at its address (connection refused, no such host). That is what a mistyped host or port
 * looks like, and the outage budget would make the user wait a minute to learn it; a few tries
 * over about 3 s still catch an origin started at the same moment that is not listening yet.
 * Once the origin has answered, the same refusal is an outage and gets the whole budget.
 */
export const FIRST_CONTACT_BUDGET_MS = 3_000;

/** A call's retry budget: the outage budget, or at most the first-contact one before any answer. */
export function callBudgetMs(budgetMs: number, firstContact: boolean): number {
  return firstContact ? Math.min(budgetMs, FIRST_CONTACT_BUDGET_MS) : budgetMs;
}

export interface BackoffPolicy {
  /** The ceiling of the first retry's delay. */
  baseMs: number;
  /** The largest ceiling the exponential growth may reach. */
  maxMs: number;
  /** The longest `Retry-After` we honour; longer requests are cut to this. */
  retryAfterMaxMs: number;
}

export const DEFAULT_BACKOFF_POLICY: BackoffPolicy = { baseMs: 100, maxMs: 10_000, retryAfterMaxMs: 30_000 };

/** Past this exponent `2^n` only matters as "larger than maxMs"; capping it keeps the maths finite. */
const EXPONENT_MAX = 40;

export interface RetryDelayInput {
  /** 1 for the first retry (the second attempt), 2 for the next, and so on. */
  attempt: number;
  /** The raw `Retry-After` header of the failed response, if any. */
  retryAfter?: string | undefined;
  /** A random number in [0, 1). */
  random: number;
  /** The current wall-clock time in ms since the epoch, for `Retry-After` given as an HTTP date. */
  nowMs: number;
}

export function retryDelayMs(input: RetryDelayInput, policy: BackoffPolicy = DEFAULT_BACKOFF_POLICY): number {
  const serverMs = parseRetryAfterMs(input.retryAfter, input.nowMs);
  if (serverMs !== undefined) return Math.min(serverMs, policy.retryAfterMaxMs);
  return Math.floor(clampRandom(input.random) * backoffCeilingMs(input.attempt, policy));
}

/** The upper bound of the jittered delay before retry number `attempt`. */
export function backoffCeilingMs(attempt: number, policy: BackoffPolicy): number {
  const exponent = Math.min(Math.max(Math.floor(attempt) - 1, 0), EXPONENT_MAX);
  return Math.min(policy.maxMs, policy.baseMs * 2 ** exponent);
}

/**
 * `Retry-After` is either a count of seconds or an HTTP date (RFC 9110 section 10.2.3). Returns the
 * wait in ms (a date in the past means 0), or undefined when the value is absent or unreadable.
 */
export function parseRetryAfterMs(value: string | undefined, nowMs: number): number | undefined {
  if (value === undefined) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  if (!/[A-Za-z]/.test(text)) return undefined;
  const dateMs = Date.parse(text);
  if (Number.isNaN(dateMs)) return undefined;
  return Math.max(0, dateMs - nowMs);
}

/**
 * The wait before the next attempt within a budget: the backoff's `delayMs`, cut to what is left of
 * `budgetMs` after `elapsedMs`; undefined once nothing is left (the call has failed for good).
 */
export function budgetedDelayMs(delayMs: number, elapsedMs: number, budgetMs: number): number | undefined {
  const leftMs = budgetMs - elapsedMs;
  if (!(leftMs > 0)) return undefined;
  return Math.max(0, Math.min(delayMs, leftMs));
}

/** Statuses that say "try again later" rather than "this will never work". */
export function isRetryableStatus(status: number): boolean {
  return status === 429 || status === 408 || (status >= 500 && status <= 599 && status !== 501);
}

function clampRandom(random: number): number {
  if (!(random >= 0)) return 0;
  return Math.min(random, 1 - Number.EPSILON);
}
