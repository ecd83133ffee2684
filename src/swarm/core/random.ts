/**
 * The swarm core's only source of randomness: xoshiro128** in 32-bit integer arithmetic, seeded by
 * splitmix32 from `SwarmConfig.randomSeed`. Every tie-break and every sample the core draws comes from
 * one instance, so one seed replays a whole run. Never Math.random: runs must be reproducible.
 */

const TWO_TO_32 = 4294967296;

export class Random {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;

  constructor(seed: number) {
    // splitmix32 spreads any seed (negative, fractional or wider than 32 bits) over the 128-bit state.
    let state = (Math.trunc(seed) ^ Math.trunc(seed / TWO_TO_32)) | 0;
    const next = (): number => {
      state = (state + 0x9e3779b9) | 0;
      let z = state;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) | 0;
    };
    this.s0 = next();
    this.s1 = next();
    this.s2 = next();
    this.s3 = next();
    // The all-zero state is the generator's one fixed point.
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s0 = 1;
  }

  /** A uniform unsigned 32-bit integer. */
  nextU32(): number {
    const s1 = this.s1;
    const product = Math.imul(s1, 5);
    const result = Math.imul((product << 7) | (product >>> 25), 9) >>> 0;
    const t = s1 << 9;
    this.s2 ^= this.s0;
    this.s3 ^= s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = (this.s3 << 11) | (this.s3 >>> 21);
    return result;
  }

  /**
   * A uniform integer in [0, n) for 0 < n <= 2^32, by multiply-and-shift: the bias is below n / 2^32,
   * far under anything a tie-break can notice, and it needs no rejection loop.
   */
  below(n: number): number {
    return Math.floor((this.nextU32() * n) / TWO_TO_32);
  }

  /** A uniform float in [0, 1). */
  nextFloat(): number {
    return this.nextU32() / TWO_TO_32;
  }

  /** Shuffles `values` in place (Fisher-Yates). */
  shuffle(values: Int32Array): void {
    for (let i = values.length - 1; i > 0; i--) {
      const j = this.below(i + 1);
      const swap = values[i]!;
      values[i] = values[j]!;
      values[j] = swap;
    }
  }
}
