/**
 * Facts about JSON text that `JSON.parse` hides. The text must already have passed `JSON.parse`: the
 * scanner trusts the syntax, tracks only strings (and their escapes) and nesting, and builds no values.
 * - An object's members in text order with each value's span, duplicates included (`JSON.parse` keeps
 *   the last duplicate silently).
 * - What serde_json, which the reference safetensors implementation uses, refuses although
 *   `JSON.parse` accepts it: unpaired surrogate escapes, numbers that overflow a 64-bit float, and
 *   containers nested 128 deep.
 */

export interface JsonMember {
  /** The member's name, unescaped. */
  key: string;
  /** The value's text is `text.slice(valueStart, valueEnd)`. */
  valueStart: number;
  valueEnd: number;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const SPACE = 0x20;
const TAB = 0x09;
const LINE_FEED = 0x0a;
const CARRIAGE_RETURN = 0x0d;
/** serde_json's recursion limit: the 128th nested container is an error. */
export const SERDE_JSON_DEPTH_MAX = 127;
// With the `u` flag a well-formed surrogate pair is one code point, so only unpaired halves match.
const UNPAIRED_SURROGATE = /[\uD800-\uDFFF]/u;
const LITERALS = new Set(['true', 'false', 'null']);

export function isJsonWhitespace(code: number): boolean {
  return code === SPACE || code === LINE_FEED || code === CARRIAGE_RETURN || code === TAB;
}

export function skipJsonWhitespace(text: string, index: number): number {
  let position = index;
  while (position < text.length && isJsonWhitespace(text.charCodeAt(position))) position++;
  return position;
}

/** The members of the object whose `{` is at `openIndex`, in the order they are written. */
export function scanObjectMembers(text: string, openIndex: number): JsonMember[] {
  const members: JsonMember[] = [];
  let index = skipJsonWhitespace(text, openIndex + 1);
  if (text.charCodeAt(index) === CLOSE_BRACE) return members;
  for (;;) {
    const keyEnd = skipString(text, index);
    const key = decodeStringLiteral(text.slice(index, keyEnd));
    // Past the whitespace and the colon that follow the name.
    const valueStart = skipJsonWhitespace(text, skipJsonWhitespace(text, keyEnd) + 1);
    const valueEnd = skipValue(text, valueStart);
    members.push({ key, valueStart, valueEnd });
    index = skipJsonWhitespace(text, valueEnd);
    if (text.charCodeAt(index) !== COMMA) return members;
    index = skipJsonWhitespace(text, index + 1);
  }
}

/** The elements of the array whose `[` is at `openIndex`, as value spans. */
export function scanArrayElements(text: string, openIndex: number): Array<[number, number]> {
  const elements: Array<[number, number]> = [];
  let index = skipJsonWhitespace(text, openIndex + 1);
  if (text.charCodeAt(index) === CLOSE_BRACKET) return elements;
  for (;;) {
    const end = skipValue(text, index);
    elements.push([index, end]);
    index = skipJsonWhitespace(text, end);
    if (text.charCodeAt(index) !== COMMA) return elements;
    index = skipJsonWhitespace(text, index + 1);
  }
}

/** The value of a string literal, quotes included; only literals with escapes pay for a real decode. */
export function decodeStringLiteral(literal: string): string {
  return literal.includes('\\') ? (JSON.parse(literal) as string) : literal.slice(1, -1);
}

/** serde_json refuses strings with unpaired surrogate escapes such as `"\\ud800"`. */
export function hasUnpairedSurrogate(value: string): boolean {
  return UNPAIRED_SURROGATE.test(value);
}

/**
 * Why serde_json would refuse the value at `text.slice(start, end)` when it decodes it generically, or
 * undefined. `depth` counts the containers around the value.
 */
export function serdeJsonProblem(
  text: string,
  start: number,
  end: number,
  depth: number,
): string | undefined {
  const first = text.charCodeAt(start);
  if (first === QUOTE) {
    const value = decodeStringLiteral(text.slice(start, end));
    return hasUnpairedSurrogate(value) ? 'has an unpaired surrogate escape' : undefined;
  }
  if (first === OPEN_BRACE || first === OPEN_BRACKET) {
    if (depth + 1 > SERDE_JSON_DEPTH_MAX) return `nests deeper than ${SERDE_JSON_DEPTH_MAX} levels`;
    return first === OPEN_BRACE
      ? objectProblem(text, start, depth + 1)
      : arrayProblem(text, start, depth + 1);
  }
  const literal = text.slice(start, end);
  if (LITERALS.has(literal) || Number.isFinite(Number(literal))) return undefined;
  return `has the number ${literal.length > 40 ? literal.slice(0, 40) + '...' : literal}, out of range`;
}

function objectProblem(text: string, openIndex: number, depth: number): string | undefined {
  for (const member of scanObjectMembers(text, openIndex)) {
    if (hasUnpairedSurrogate(member.key)) return 'has an unpaired surrogate escape';
    const problem = serdeJsonProblem(text, member.valueStart, member.valueEnd, depth);
    if (problem !== undefined) return problem;
  }
  return undefined;
}

function arrayProblem(text: string, openIndex: number, depth: number): string | undefined {
  for (const [start, end] of scanArrayElements(text, openIndex)) {
    const problem = serdeJsonProblem(text, start, end, depth);
    if (problem !== undefined) return problem;
  }
  return undefined;
}

/** Index just past the string literal whose opening quote is at `quoteIndex`. */
function skipString(text: string, quoteIndex: number): number {
  let from = quoteIndex + 1;
  for (;;) {
    const close = text.indexOf('"', from);
    // A quote preceded by an odd number of backslashes is escaped and does not close the string.
    let backslashes = 0;
    while (text.charCodeAt(close - 1 - backslashes) === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return close + 1;
    from = close + 1;
  }
}

/** Index just past the value that starts at `start`. */
function skipValue(text: string, start: number): number {
  const first = text.charCodeAt(start);
  if (first === QUOTE) return skipString(text, start);
  if (first !== OPEN_BRACE && first !== OPEN_BRACKET) return skipScalar(text, start);
  let depth = 0;
  let index = start;
  for (;;) {
    const code = text.charCodeAt(index);
    if (code === QUOTE) {
      index = skipString(text, index);
      continue;
    }
    if (code === OPEN_BRACE || code === OPEN_BRACKET) depth++;
    else if (code === CLOSE_BRACE || code === CLOSE_BRACKET) {
      depth--;
      if (depth === 0) return index + 1;
    }
    index++;
  }
}

/** Numbers, `true`, `false` and `null` end at the first delimiter or whitespace. */
function skipScalar(text: string, start: number): number {
  let index = start;
  while (index < text.length) {
    const code = text.charCodeAt(index);
    if (code === COMMA || code === CLOSE_BRACE || code === CLOSE_BRACKET || isJsonWhitespace(code)) break;
    index++;
  }
  return index;
}
