/**
 * The fluid lower bound on fan-out time: delivering S bytes from an origin with upload U to N hosts
 * with download B and upload u takes at least max(S/U, S/B, N*S/(U + N*u)). The first term is the
 * origin sending every byte once, the second a host receiving every byte, the third all N copies
 * flowing through the total upload capacity of the swarm. Pure arithmetic.
 */

export interface BoundInput {
  totalBytes: number;
  hosts: number;
  originUploadBytesPerSecond: number;
  hostDownloadBytesPerSecond: number;
  hostUploadBytesPerSecond: number;
}

export function fluidLowerBoundSeconds(input: BoundInput): number {
  const { totalBytes: s, hosts: n } = input;
  return Math.max(
    s / input.originUploadBytesPerSecond,
    s / input.hostDownloadBytesPerSecond,
    (n * s) / (input.originUploadBytesPerSecond + n * input.hostUploadBytesPerSecond),
  );
}
