"""The protected side: a resource that checks fencing tokens, so that a holder whose lease ran
out (paused, partitioned, slow) cannot write over the work of the next holder.

The rule is one comparison: accept a write only if its token is at least the highest the
resource has seen, and remember the token. The same holder may write many times with its
token; a holder with a lower token — an older lease — is refused, whatever it believes.

- :class:`FencedValue`: the rule around a value in memory.
- :func:`update_sql`: the rule as one conditional SQL ``UPDATE``, for a table with a
  ``fencing_token`` column: the database checks and records the token in the same statement
  as the write, so no check can go stale before the write.

>>> balance = FencedValue(100)
>>> balance.write(41, 90)       # A, lease 41
>>> balance.write(42, 80)       # B, lease 42: A's lease had expired
>>> balance.write(41, 70)       # A again, after a pause
Traceback (most recent call last):
    ...
fencelock.fence.StaleToken: stale fencing token 41: a write with token 42 was already accepted
>>> balance.get()
80
"""

from __future__ import annotations

import threading
from typing import Callable, Generic, Optional, TypeVar

__all__ = ["TOKEN_COLUMN", "FencedValue", "StaleToken", "update_sql"]

T = TypeVar("T")
R = TypeVar("R")

#: The column that :func:`update_sql` reads and writes.
TOKEN_COLUMN = "fencing_token"


class StaleToken(Exception):
    """A write refused because it carries an older lease's token."""

    def __init__(self, given: int, highest: int) -> None:
        super().__init__(
            f"stale fencing token {given}: a write with token {highest} was already accepted"
        )
        #: The token the write carried.
        self.given = given
        #: The highest token accepted so far.
        self.highest = highest


class FencedValue(Generic[T]):
    """A value that accepts a write only with a fencing token at least as high as every token
    it accepted before. Thread-safe."""

    def __init__(self, value: T) -> None:
        self._lock = threading.Lock()
        self._value = value
        self._highest: Optional[int] = None

    def write(self, token: int, value: T) -> None:
        """Replaces the value, if ``token`` is at least the highest token seen."""

        def replace(_: T) -> T:
            return value

        self.update(token, replace)

    def update(self, token: int, change: Callable[[T], T]) -> T:
        """Replaces the value by ``change(value)``, if ``token`` is at least the highest token
        seen; the check and the change happen under one lock. Returns the new value."""
        with self._lock:
            if self._highest is not None and token < self._highest:
                raise StaleToken(token, self._highest)
            self._value = change(self._value)
            self._highest = token
            return self._value

    @property
    def highest_token(self) -> Optional[int]:
        """The highest token accepted so far."""
        return self._highest

    def get(self) -> T:
        """The value."""
        with self._lock:
            return self._value


def update_sql(table: str, assignments: str, condition: str, token: str) -> str:
    r"""A fenced ``UPDATE``: sets ``assignments`` and records the token, only where
    ``condition`` holds and the row has not seen a higher token. ``token`` is the placeholder
    of the fencing token in your driver's syntax (``?`` or ``:token`` for SQLite, ``%(token)s``
    for psycopg).

    The table needs a ``fencing_token BIGINT NOT NULL DEFAULT 0`` column. If the statement
    changes no row, the write was refused (or the row does not exist): the holder's lease has
    passed to someone else, so it must stop.

    >>> sql = update_sql("accounts", "balance = :balance", "id = :id", ":token")
    >>> print(sql.replace(" WHERE", "\nWHERE"))
    UPDATE accounts SET balance = :balance, fencing_token = :token
    WHERE (id = :id) AND fencing_token <= :token
    """
    return (
        f"UPDATE {table} SET {assignments}, {TOKEN_COLUMN} = {token} "
        f"WHERE ({condition}) AND {TOKEN_COLUMN} <= {token}"
    )
