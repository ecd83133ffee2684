/**
 * The vocabulary of the streaming materialiser. A caller asks for byte ranges of a model's files
 * (a whole tensor is one range; a tensor-parallel slice of one will be several) and gets each
 * request's bytes back, concatenated, once every byte has been read and verified.
 */

import type { Dtype } from '../../format/dtype.js';

/** A half-open byte range [start, end) of one file, in file offsets. */
export interface ByteRange {
  start: number;
  end: number;
}

/** One thing to deliver: the bytes of `ranges` of `file`, in order, as one contiguous buffer. */
export interface ReadRequest<T> {
  file: string;
  /** Sorted, not overlapping; empty ranges are allowed and contribute nothing. */
  ranges: readonly ByteRange[];
  /** The caller's own description of the request, handed back with the bytes. */
  tag: T;
}

/**
 * A delivered request. `bytes` is a view into the loader's memory arena and stays valid only until
 * the consumer asks for the next item: copy it to keep it. This is what bounds memory.
 */
export interface Delivered<T> {
  request: ReadRequest<T>;
  bytes: Buffer;
  /**
   * Present only when the stream was asked for parts (`partBytes`) and this request was larger: `bytes`
   * are the request's bytes from `offset` on, and `last` marks the request's final part. Parts of one
   * request may arrive in any order, interleaved with other requests.
   */
  part?: DeliveredPart;
  /**
   * Keeps `bytes` valid past the next turn of the loop until the returned function is called (once).
   * For consumers that hand the bytes to asynchronous work, such as a positioned write; the space
   * stays taken out of the budget meanwhile, so holding too many stops reading.
   */
  hold?: () => () => void;
}

export interface DeliveredPart {
  /** Where `bytes` begin within the request's concatenated bytes. */
  offset: number;
  last: boolean;
}

/** A file of the model as the loader sees it. */
export interface ModelFile {
  /** Relative POSIX path, already checked to stay inside the model. */
  path: string;
  size: number;
  /** Expected SHA-256 (hex) of each piece; absent when there is no manifest to verify against. */
  pieces?: readonly string[];
}

/** A tensor of a safetensors file, with its absolute byte range in that file. */
export interface TensorInfo {
  file: string;
  name: string;
  dtype: Dtype;
  shape: number[];
  start: number;
  end: number;
}

/** What the loader delivers for a tensor. `bytes` follows the lifetime rule of `Delivered`. */
export interface LoadedTensor {
  name: string;
  dtype: Dtype;
  shape: number[];
  file: string;
  bytes: Buffer;
  /** Set when the load was asked for parts (`partBytes`) and this tensor was larger. */
  part?: DeliveredPart;
}

/** Counters a stream keeps; read them at any time, e.g. after the loop ends. */
export interface StreamStats {
  /** Bytes read from the origin (whole pieces when verifying, retries included). */
  bytesRead: number;
  /** Bytes delivered to the consumer. */
  bytesDelivered: number;
  piecesVerified: number;
  piecesRejected: number;
  /** Bytes copied between buffers (heads of groups that start inside the previous group's piece). */
  bytesCopied: number;
  /** Arena bytes in use plus carried piece tails, now and at the peak. */
  residentBytes: number;
  residentBytesPeak: number;
  /** The arena's size: the part of the budget that holds read buffers. */
  arenaBytes: number;
}
