/**
 * A small checker for JSON from outside, for the modules every agent and scheduler loads at start:
 * the swarm's wire messages, the manifest, the agent's local API. It does what they used zod for
 * (types, bounds, patterns, unknown keys dropped, the first problem and where it is), in one small
 * module: loading zod and compiling its schemas cost a cold agent or scheduler about 0.1 CPU-s
 * before its first request (`node -e "await import('zod')"`: 0.16 CPU-s against 0.07 for node
 * alone), paid by every host of a fan-out at once. Commands off that path (the seed tier, the
 * loader's plans) keep zod.
 *
 * A schema is a function that returns the checked value (objects rebuilt with only their known
 * keys) or throws a SchemaIssue; `Infer<typeof schema>` is its type.
 */

export type Path = Array<string | number>;

export class SchemaIssue extends Error {
  constructor(
    readonly path: Path,
    readonly problem: string,
  ) {
    super(`${path.join('.') || '(root)'}: ${problem}`);
  }
}

export interface Schema<T> {
  /** `path` is where `value` sits, a stack the check may push to and must pop (no copies in the hot path). */
  check(value: unknown, path: Path): T;
  readonly optional?: boolean;
}

/** A key that may be absent (never present as undefined in the result). */
export interface OptionalSchema<T> extends Schema<T> {
  readonly optional: true;
}

export type Infer<S> = S extends Schema<infer T> ? T : never;

export type SafeParse<T> = { success: true; data: T } | { success: false; issue: SchemaIssue };

export function safeParse<T>(schema: Schema<T>, value: unknown): SafeParse<T> {
  try {
    return { success: true, data: schema.check(value, []) };
  } catch (error) {
    if (error instanceof SchemaIssue) return { success: false, issue: error };
    throw error;
  }
}

/** `path` is the checker's working stack (children push and pop their key): copied only on failure. */
function fail(path: Path, problem: string): never {
  throw new SchemaIssue([...path], problem);
}

export interface StringRules {
  min?: number;
  max?: number;
  /** The pattern, and what to say when it does not match. */
  pattern?: readonly [RegExp, string];
  /** A URL that `new URL` accepts. */
  url?: boolean;
  /** Any other rule, and what to say when it fails. */
  refine?: readonly [(value: string) => boolean, string];
}

export function string(rules: StringRules = {}): Schema<string> {
  return {
    check(value, path) {
      if (typeof value !== 'string') fail(path, `expected a string, got ${kindOf(value)}`);
      if (rules.min !== undefined && value.length < rules.min)
        fail(path, `too short: at least ${rules.min} characters`);
      if (rules.max !== undefined && value.length > rules.max)
        fail(path, `too long: at most ${rules.max} characters`);
      if (rules.pattern !== undefined && !rules.pattern[0].test(value)) fail(path, rules.pattern[1]);
      if (rules.url === true && !URL.canParse(value)) fail(path, 'expected a URL');
      if (rules.refine !== undefined && !rules.refine[0](value)) fail(path, rules.refine[1]);
      return value;
    },
  };
}

export interface NumberRules {
  int?: boolean;
  /** Inclusive bounds. */
  min?: number;
  max?: number;
  /** Above 0. */
  positive?: boolean;
}

/** A finite number (JSON has no other kind) within the rules. */
export function number(rules: NumberRules = {}): Schema<number> {
  return {
    check(value, path) {
      if (typeof value !== 'number' || !Number.isFinite(value))
        fail(path, `expected a finite number, got ${kindOf(value)}`);
      if (rules.int === true && !Number.isInteger(value)) fail(path, 'expected an integer');
      if (rules.positive === true && !(value > 0)) fail(path, 'expected a number above 0');
      if (rules.min !== undefined && value < rules.min) fail(path, `too small: at least ${rules.min}`);
      if (rules.max !== undefined && value > rules.max) fail(path, `too large: at most ${rules.max}`);
      return value;
    },
  };
}

/** An integer >= 0 (counts, ids, indices), at most `max`. */
export function count(max: number = Number.MAX_SAFE_INTEGER): Schema<number> {
  return number({ int: true, min: 0, max });
}

export function boolean(): Schema<boolean> {
  return {
    check(value, path) {
      if (typeof value !== 'boolean') fail(path, `expected true or false, got ${kindOf(value)}`);
      return value;
    },
  };
}

export function literal<const T extends string | number>(expected: T): Schema<T> {
  return {
    check(value, path) {
      if (value !== expected) fail(path, `expected ${JSON.stringify(expected)}`);
      return expected;
    },
  };
}

export function oneOf<const T extends string>(values: readonly T[]): Schema<T> {
  const allowed = new Set<string>(values);
  return {
    check(value, path) {
      if (typeof value !== 'string' || !allowed.has(value))
        fail(path, `expected one of ${values.map((v) => JSON.stringify(v)).join(', ')}`);
      return value as T;
    },
  };
}

export function array<T>(item: Schema<T>, rules: { max?: number } = {}): Schema<T[]> {
  return {
    check(value, path) {
      if (!Array.isArray(value)) fail(path, `expected an array, got ${kindOf(value)}`);
      if (rules.max !== undefined && value.length > rules.max)
        fail(path, `too many items: at most ${rules.max}`);
      const out: T[] = new Array<T>(value.length);
      for (let i = 0; i < value.length; i++) {
        path.push(i);
        out[i] = item.check(value[i], path);
        path.pop();
      }
      return out;
    },
  };
}

export function optional<T>(schema: Schema<T>): OptionalSchema<T> {
  return { check: (value, path) => schema.check(value, path), optional: true };
}

type Shape = Record<string, Schema<unknown>>;
type OptionalKeys<S extends Shape> = {
  [K in keyof S]: S[K] extends OptionalSchema<unknown> ? K : never;
}[keyof S];
type RequiredKeys<S extends Shape> = Exclude<keyof S, OptionalKeys<S>>;
type Flatten<T> = { [K in keyof T]: T[K] };
export type ObjectOf<S extends Shape> = Flatten<
  { [K in RequiredKeys<S>]: Infer<S[K]> } & { [K in OptionalKeys<S>]?: Infer<S[K]> }
>;

/** A JSON object with these keys; keys it does not name are dropped, an absent optional key stays absent. */
export function object<S extends Shape>(shape: S): Schema<ObjectOf<S>> {
  const keys = Object.keys(shape);
  return {
    check(value, path) {
      if (typeof value !== 'object' || value === null || Array.isArray(value))
        fail(path, `expected an object, got ${kindOf(value)}`);
      const source = value as Record<string, unknown>;
      const out: Record<string, unknown> = {};
      for (const key of keys) {
        const schema = shape[key]!;
        const present = Object.hasOwn(source, key) && source[key] !== undefined;
        if (!present && schema.optional === true) continue;
        path.push(key);
        if (!present) fail(path, 'required');
        out[key] = schema.check(source[key], path);
        path.pop();
      }
      return out as ObjectOf<S>;
    },
  };
}

/** Anything (it is the caller's to look at). */
export function unknown(): Schema<unknown> {
  return { check: (value) => value };
}

/** A JSON object used as a map: any keys, each value checked (`__proto__` stays an ordinary key). */
export function record<T>(values: Schema<T>): Schema<Record<string, T>> {
  return {
    check(value, path) {
      if (typeof value !== 'object' || value === null || Array.isArray(value))
        fail(path, `expected an object, got ${kindOf(value)}`);
      const entries = Object.entries(value).map(([key, item]) => {
        path.push(key);
        const checked = values.check(item, path);
        path.pop();
        return [key, checked];
      });
      return Object.fromEntries(entries) as Record<string, T>;
    },
  };
}

function kindOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : typeof value;
}
