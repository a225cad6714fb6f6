/**
 * JSON with exact fencing tokens. A token is an unsigned 64-bit integer; a JavaScript number
 * is exact only up to 2^53, and two tokens rounded to the same number would let a stale
 * write through. So tokens travel as `bigint`, and only the `fencing_token` member needs it.
 *
 * @module
 */

/**
 * A `fencing_token` member whose opening quote is JSON structure, not string content: inside
 * a string every `"` is escaped (`\"`), so one right after `{`, `,` or white space opens a key.
 */
const TOKEN_MEMBER = /([{,]\s*"fencing_token"\s*:\s*)(\d+)/g;

/** Parses an answer, with every `fencing_token` kept as a decimal string (see {@link bigintOf}). */
export function parse(text: string): unknown {
  return JSON.parse(text.replace(TOKEN_MEMBER, '$1"$2"'));
}

/**
 * `fields` as a JSON object, with `fencing_token` appended as a JSON integer when given
 * (`JSON.stringify` cannot write a bigint).
 */
export function stringify(fields: Record<string, unknown>, token?: bigint): string {
  const json = JSON.stringify(fields);
  if (token === undefined) return json;
  const comma = json === "{}" ? "" : ",";
  return `${json.slice(0, -1)}${comma}"fencing_token":${token.toString()}}`;
}

/** A token as {@link parse} leaves it, or undefined if it is not one. */
export function bigintOf(value: unknown): bigint | undefined {
  return typeof value === "string" && /^\d+$/.test(value) ? BigInt(value) : undefined;
}
