/**
 * Positioned writes kept in flight while the stream goes on reading. An output's `write` used to
 * finish its write before the consumer asked for the next item, so one write at a time ran next to
 * the reads. Here a delivered buffer is held (`Delivered.hold`), its write is started and `write`
 * returns at once unless `writesMax` writes are already running; then it waits for one to finish.
 * The held space stays counted in the stream's budget until its write is done, so memory is still
 * bounded, and a full arena stops reading as it should.
 *
 * The first failed write is kept and thrown by the next `write` or by `drain`.
 */

import type { Delivered } from './types.js';

export const WRITES_MAX_DEFAULT = 4;

export class WritePipeline {
  private readonly running = new Set<Promise<void>>();
  private failure: unknown;
  private failed = false;

  constructor(private readonly writesMax: number = WRITES_MAX_DEFAULT) {}

  /** Starts `write(bytes)`; waits only while `writesMax` writes are running. */
  async add<T>(delivered: Delivered<T>, write: (bytes: Uint8Array) => Promise<void>): Promise<void> {
    this.throwIfFailed();
    if (delivered.hold === undefined) {
      // Nothing to hold the bytes with: they are valid only until the next turn, so write them now.
      await write(delivered.bytes);
      return;
    }
    const letGo = delivered.hold();
    const done: Promise<void> = write(delivered.bytes)
      .catch((error: unknown) => {
        if (!this.failed) {
          this.failed = true;
          this.failure = error;
        }
      })
      .finally(() => {
        letGo();
        this.running.delete(done);
      });
    this.running.add(done);
    while (this.running.size >= this.writesMax) await Promise.race(this.running);
    this.throwIfFailed();
  }

  /** Waits for every write; throws the first failure. */
  async drain(): Promise<void> {
    while (this.running.size > 0) await Promise.race(this.running);
    this.throwIfFailed();
  }

  /** Waits for every write and forgets failures: for cleaning up after an error. */
  async settle(): Promise<void> {
    while (this.running.size > 0) await Promise.race(this.running);
  }

  private throwIfFailed(): void {
    if (this.failed) throw this.failure;
  }
}
