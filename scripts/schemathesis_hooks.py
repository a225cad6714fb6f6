"""What `scripts/schemathesis` adds to schemathesis (loaded through SCHEMATHESIS_HOOKS).

- The failures it does not count: answers the SPEC asks for that JSON Schema cannot
  describe, which the tool takes for a server refusing valid data. Each is named in
  docs/SCHEMATHESIS.md; anything else schemathesis finds counts.
- Waits kept short: an acquire may wait in line for its `wait_ms` (up to 300 s), longer
  than the tool waits for an answer.
"""

import json
import os

import schemathesis

# The integer fields of request bodies. The SPEC takes only JSON integers as written (`60.0`
# is refused); JSON Schema's `integer` admits any number without a fraction, so the tool
# sends `10385.0` as a valid `fencing_token`.
INTEGER_FIELDS = {"ttl_seconds", "ttl_ms", "wait_ms", "fencing_token", "limit"}

# The longest wait a generated acquire keeps, in milliseconds: well under the tool's 10 s.
LONGEST_WAIT_MS = 1000
# The longest `wait_ms` the server takes (its default); past it is a 422 to keep as it is.
MAX_WAIT_MS = 300_000


@schemathesis.hook
def map_body(context, body):
    """Shortens a valid `wait_ms` to at most LONGEST_WAIT_MS; invalid ones stay invalid."""
    if isinstance(body, dict):
        wait = body.get("wait_ms")
        if type(wait) is int and LONGEST_WAIT_MS < wait <= MAX_WAIT_MS:
            body["wait_ms"] = LONGEST_WAIT_MS
    return body


@schemathesis.hook
def filter_failure(context, failure, case, response):
    """Keeps a failure unless it is a 422 whose every bad field is one of those limits, whose
    reasons it notes, one a line, in the file FENCELOCK_NOT_COUNTED names."""
    reasons = _reasons(case, response) if failure.code == "ST202" else None
    if reasons and os.environ.get("FENCELOCK_NOT_COUNTED"):
        with open(os.environ["FENCELOCK_NOT_COUNTED"], "a", encoding="utf-8") as notes:
            notes.writelines(f"{reason}\n" for reason in sorted(reasons))
    return not reasons


def _reasons(case, response):
    """Why the SPEC refuses each bad field of a 422, if JSON Schema cannot say why; else None."""
    if response.status_code != 422:
        return None
    try:
        fields = {error["field"] for error in json.loads(response.content)["errors"]}
    except (ValueError, KeyError, TypeError):
        return None
    body = case.body if isinstance(case.body, dict) else {}
    reasons = {_limit_of_json_schema(field, body) for field in fields}
    return None if not fields or None in reasons else reasons


def _limit_of_json_schema(field, body):
    # A list's cursor is opaque: only one the server gave is valid, and no schema can say
    # which those are.
    if field == "cursor":
        return "a `cursor` the server never gave"
    value = body.get(field)
    if field in INTEGER_FIELDS and isinstance(value, float) and value.is_integer():
        return f"`{field}` sent as N.0"
    return None
