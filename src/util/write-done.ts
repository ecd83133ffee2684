/**
 * A write whose buffer the caller wants back: resolves once the stream has taken the bytes (its
 * write callback ran), so a pooled buffer may be reused, or false when the stream failed or closed
 * first, when the buffer may still be referenced and must not be. Used by the servers that send
 * from reused buffers or wait for each part to be taken (the peer wire's, the file server's, a
 * seed node's).
 *
 * A stream gets one 'close' listener however many of its writes are waiting (a peer that pipelines
 * many requests on one connection has many), not one per write: eleven made Node warn of a leak.
 */

/** What writeDone needs of a socket or an HTTP response. */
export interface ClosableWritable {
  readonly destroyed: boolean;
  write(bytes: Uint8Array, callback: (error?: Error | null) => void): boolean;
  once(event: 'close', listener: () => void): unknown;
}

/** Per stream, the writes waiting to be taken, each told false if the stream closes first. */
const waiting = new WeakMap<ClosableWritable, Set<(ok: boolean) => void>>();

/** Writes `bytes`; true once the stream has taken them, false if it failed or closed first. */
export function writeDone(stream: ClosableWritable, bytes: Uint8Array): Promise<boolean> {
  if (stream.destroyed) return Promise.resolve(false);
  let waiters = waiting.get(stream);
  if (waiters === undefined) {
    const set = new Set<(ok: boolean) => void>();
    waiting.set(stream, set);
    stream.once('close', () => {
      waiting.delete(stream);
      for (const waiter of set) waiter(false);
      set.clear();
    });
    waiters = set;
  }
  const own = waiters;
  return new Promise<boolean>((resolve) => {
    own.add(resolve);
    stream.write(bytes, (error) => {
      own.delete(resolve);
      resolve(error === undefined || error === null);
    });
  });
}
