/** Small concurrency limits shared by `put` and the re-layout apply: a counting semaphore and a pool. */

import { abortError } from '../errors.js';

export class Semaphore {
  private used = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(readonly slots: number) {}

  get free(): number {
    return this.slots - this.used;
  }

  tryAcquire(): boolean {
    if (this.used >= this.slots) return false;
    this.used++;
    return true;
  }

  async acquire(signal?: AbortSignal): Promise<void> {
    if (this.tryAcquire()) return;
    await new Promise<void>((resolve, reject) => {
      const onAbort = (): void => {
        const index = this.waiting.indexOf(wake);
        if (index >= 0) this.waiting.splice(index, 1);
        reject(abortError(signal, 'waiting for a slot'));
      };
      const wake = (): void => {
        signal?.removeEventListener('abort', onAbort);
        this.used++;
        resolve();
      };
      if (signal?.aborted === true) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(wake);
    });
  }

  release(): void {
    this.used--;
    this.waiting.shift()?.();
  }

  async with<T>(run: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    await this.acquire(signal);
    try {
      return await run();
    } finally {
      this.release();
    }
  }
}

/** Runs `work` over `items` with at most `concurrency` at once; the first failure stops new work. */
export async function runPool<T>(
  items: readonly T[],
  concurrency: number,
  work: (item: T) => Promise<void>,
  signal?: AbortSignal,
): Promise<void> {
  let next = 0;
  let failed = false;
  const lane = async (): Promise<void> => {
    while (!failed && next < items.length) {
      if (signal?.aborted === true) throw abortError(signal, 'the transfer');
      const item = items[next++] as T;
      try {
        await work(item);
      } catch (error) {
        failed = true;
        throw error;
      }
    }
  };
  const lanes = Array.from({ length: Math.max(1, Math.min(concurrency, items.length)) }, lane);
  const results = await Promise.allSettled(lanes);
  const rejected = results.find((result) => result.status === 'rejected');
  if (rejected !== undefined) throw rejected.reason;
}
