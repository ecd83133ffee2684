/**
 * Parsing a JSON document from outside against a zod schema, with typed errors that name the source:
 * too large, not JSON, or not the document it should be (the first schema issue and where it is).
 * Shared by the model manifest and the plan manifest; each then checks what a schema cannot.
 */

import type { z } from 'zod';
import { WeightcastError, type ErrorCode } from '../errors.js';

export interface JsonDocumentKind {
  /** What the document is, for messages: "manifest", "plan manifest". */
  name: string;
  bytesMax: number;
  /** Code for a document over bytesMax. */
  tooLargeCode: ErrorCode;
  /** Code for bytes that are not JSON or not this document. */
  invalidCode: ErrorCode;
}

export function parseJsonDocument<Schema extends z.ZodTypeAny>(
  bytes: Buffer | string,
  source: string,
  schema: Schema,
  kind: JsonDocumentKind,
): z.infer<Schema> {
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
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue === undefined ? '' : ` at ${issue.path.join('.') || '(root)'}: ${issue.message}`;
    throw new WeightcastError(kind.invalidCode, `${source}: not a weightcast ${kind.name}${where}`, {
      file: source,
    });
  }
  return parsed.data;
}
