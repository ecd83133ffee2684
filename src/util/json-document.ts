/**
 * Parsing a JSON document from outside against a schema, with typed errors that name the source:
 * too large, not JSON, or not the document it should be (the first problem and where it is).
 * Shared by the model manifest (util/schema.ts) and the plan manifest (zod); each then checks what
 * a schema cannot.
 */

import { WeightcastError, type ErrorCode } from '../errors.js';
import { safeParse, type Schema } from './schema.js';

export interface JsonDocumentKind {
  /** What the document is, for messages: "manifest", "plan manifest". */
  name: string;
  bytesMax: number;
  /** Code for a document over bytesMax. */
  tooLargeCode: ErrorCode;
  /** Code for bytes that are not JSON or not this document. */
  invalidCode: ErrorCode;
}

/** Checks a parsed document: its value, or where it is wrong and how ("files.0.size: ..."). */
export type DocumentCheck<T> = (raw: unknown) => { ok: true; value: T } | { ok: false; where: string };

/** The check of a util/schema.ts schema. */
export function schemaCheck<T>(schema: Schema<T>): DocumentCheck<T> {
  return (raw) => {
    const parsed = safeParse(schema, raw);
    return parsed.success ? { ok: true, value: parsed.data } : { ok: false, where: parsed.issue.message };
  };
}

export function parseJsonDocument<T>(
  bytes: Buffer | string,
  source: string,
  check: DocumentCheck<T>,
  kind: JsonDocumentKind,
): T {
  if (bytes.length > kind.bytesMax) {
    throw new WeightcastError(kind.tooLargeCode, `${source}: ${kind.name} exceeds ${kind.bytesMax} bytes`, {
      file: source,
    });
  }
  let raw: unknown;
  try {
    raw = JSON.parse(typeof bytes === 'string' ? bytes : bytes.toString('utf8'));
  } catch (error) {
    throw new WeightcastError(
      kind.invalidCode,
      `${source}: not valid JSON`,
      { file: source },
      { cause: error },
    );
  }
  const parsed = check(raw);
  if (!parsed.ok) {
    throw new WeightcastError(
      kind.invalidCode,
      `${source}: not a weightcast ${kind.name} at ${parsed.where}`,
      {
        file: source,
      },
    );
  }
  return parsed.value;
}
