/**
 * Fencing tokens are unsigned 64-bit integers, exact only as `bigint`: read and written
 * without rounding, past 2^53 too, and only where `fencing_token` is a member.
 */

import assert from "node:assert/strict";
import { it } from "node:test";

import { bigintOf, parse, stringify } from "../src/json";

it("reads and writes fencing tokens past 2^53 exactly, and nothing else as a token", () => {
  const max = "18446744073709551615";
  const answer = parse(
    `{"resource":"r","fencing_token":${max},"holder":{ "fencing_token" : 9007199254740993},` +
      `"owner":"x\\",\\"fencing_token\\":5","expires_in_ms":10}`,
  ) as Record<string, any>;
  assert.equal(bigintOf(answer.fencing_token), 2n ** 64n - 1n);
  assert.equal(bigintOf(answer.holder.fencing_token), 2n ** 53n + 1n);
  assert.equal(answer.owner, 'x","fencing_token":5', "string content is left alone");
  assert.equal(answer.expires_in_ms, 10);
  assert.equal(stringify({ owner: "a", ttl_ms: 5 }, 2n ** 64n - 1n), `{"owner":"a","ttl_ms":5,"fencing_token":${max}}`);
  assert.equal(stringify({}, 7n), '{"fencing_token":7}');
  assert.equal(stringify({ owner: "a" }), '{"owner":"a"}');
  assert.equal(bigintOf(12), undefined, "a token is read from the string parse leaves");
});
