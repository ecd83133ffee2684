/**
 * A write whose buffer the caller wants back: resolves once the stream has taken the bytes (its
 * write callback ran), so a pooled buffer may be reused, or false when the stream failed or closed
 * first, when the buffer may still be referenced and must not be. Used by the servers that send
 * from reused buffers or wait for each part to be taken (the peer wire's, the file server's, a
 * seed node's).
 */

/** What writeDone needs of a socket or an HTTP response. */
export interface ClosableWritable {
  readonly destroyed: boolean;
  write(bytes: Uint8Array, callback: (error?: Error | null) => void): boolean;
  once(event: 'close', listener: () => void): unknown;
  off(event: 'close', listener: () => void): unknown;
}

/** Writes `bytes`; true once the stream has taken them, false if it failed or closed first. */
export function writeDone(stream: ClosableWritable, bytes: Uint8Array): Promise<boolean> {
  if (stream.destroyed) return Promise.resolve(false);
  return new Promise<boolean>((resolve) => {
    const onClose = (): void => resolve(false);
    stream.once('close', onClose);
    stream.write(bytes, (error) => {
      stream.off('close', onClose);
      resolve(error === undefined || error === null);
    });
  });
}
