"""The HTTP API's requests and answers, with no I/O: what to send, and what an answer means.

Everything here is plain data in and plain data out, so the sync and the asyncio clients
send the same bytes and read answers the same way (see ``docs/SPEC.md`` and the README of the
repository for the API). Locks travel at ``/locks/{name}``, semaphores at
``/semaphores/{name}``, read-write locks at ``/rwlocks/{name}``, several locks at once at
``POST /locks``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Optional, Union
from urllib.parse import quote

from .errors import (
    PROBLEM_CLASSES,
    FencelockError,
    FieldError,
    ProblemError,
    RateLimited,
    UnexpectedAnswer,
)


class Kind(str, Enum):
    """The namespace a lease lives in: ``/locks/x``, ``/semaphores/x`` and ``/rwlocks/x`` are
    unrelated."""

    LOCK = "lock"
    SEMAPHORE = "semaphore"
    RWLOCK = "rwlock"

    @property
    def collection(self) -> str:
        """The path its names live under."""
        return {"lock": "/locks", "semaphore": "/semaphores", "rwlock": "/rwlocks"}[self.value]

    @property
    def granted_key(self) -> str:
        """The member of a granted answer that holds the lease."""
        return {"lock": "lock", "semaphore": "permit", "rwlock": "hold"}[self.value]

    @property
    def name_key(self) -> str:
        """The member of a lease that holds its name."""
        return "resource" if self is Kind.LOCK else "name"


@dataclass(frozen=True)
class Request:
    """One request to send: the path is relative to the server's address, already escaped."""

    method: str
    path: str
    body: Optional[Mapping[str, Any]] = None


@dataclass(frozen=True)
class Answer:
    """What the server answered: the parts of it this client reads."""

    status: int
    body: bytes
    content_type: str = ""
    retry_after: Optional[str] = None


@dataclass(frozen=True)
class LeaseInfo:
    """A lease as the server describes it: a lock's lease, a semaphore's permit, or a
    read-write lock's hold. Times are the server's wall clock: for people, never for deciding
    (the guard counts on this process's monotonic clock)."""

    kind: Kind
    #: The lock's (semaphore's, read-write lock's) name.
    name: str
    owner: str
    #: The fencing token: pass it to the protected resource with every write.
    token: int
    acquired_at: datetime
    expires_at: datetime
    #: The cap on holding, if the lease has one: no renewal keeps it past this.
    hold_until: Optional[datetime] = None
    #: For a semaphore's permit: the semaphore's limit.
    limit: Optional[int] = None
    #: For a read-write lock's hold: ``"read"`` or ``"write"``.
    mode: Optional[str] = None
    #: On a server with authentication on: the principal that took it.
    principal: Optional[str] = None


@dataclass(frozen=True)
class NotAcquired:
    """An acquire that was not granted (within its wait, if it had one) — contention, not an
    error: who holds what was asked for, and when asking again may be answered otherwise."""

    kind: Kind
    #: The name asked for (for several locks: the first one in the way).
    name: str
    #: The live leases in the way: the lock's holder, the semaphore's permits, the read-write
    #: lock's holds (for several locks: the holders of every lock in the way).
    holders: tuple[LeaseInfo, ...] = ()
    #: Seconds until the holder's lease ends unless renewed (a lock held by another owner).
    expires_in: Optional[float] = None
    #: Seconds until asking again may be answered otherwise, if the server says.
    retry_in: Optional[float] = None
    #: The lock is held by nobody, but closed by the server's lock-delay: its last lease
    #: expired unreleased less than ``--lock-delay`` ago.
    delayed: bool = False
    #: The server answered because it is shutting down; the holder is not known.
    shutting_down: bool = False
    #: A read-write lock: a writer waits, so readers that came after it wait too.
    writer_waits: bool = False
    #: Several locks: one refusal per lock in the way, in the order asked for.
    in_the_way: tuple[NotAcquired, ...] = ()
    #: The whole answer, members this client does not know included.
    answer: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def holder(self) -> Optional[LeaseInfo]:
        """The (first) live lease in the way, if the server named one."""
        return self.holders[0] if self.holders else None

    def __str__(self) -> str:
        if self.in_the_way:
            return "none of the locks was acquired: " + "; ".join(map(str, self.in_the_way))
        what = {
            Kind.LOCK: "",
            Kind.SEMAPHORE: "the semaphore ",
            Kind.RWLOCK: "the read-write lock ",
        }
        words = f"{what[self.kind]}{self.name} is not acquired"
        if self.delayed:
            words = f"{self.name} is closed by its lock-delay"
        elif self.holders:
            owners = ", ".join(f"{h.owner} (fencing token {h.token})" for h in self.holders)
            words = f"{what[self.kind]}{self.name} is held by {owners}"
        elif self.shutting_down:
            words += ": the server is shutting down"
        if self.writer_waits:
            words += "; a writer waits before you"
        if self.retry_in is not None:
            words += f" ({self.retry_in:.3f} s more)"
        return words


@dataclass(frozen=True)
class Claim:
    """What an acquire asks for: a lock, several locks at once, a permit or a hold, on terms."""

    kind: Kind
    names: tuple[str, ...]
    ttl_ms: int
    #: Several locks, all or none, in one ``POST /locks``.
    together: bool = False
    max_hold_ms: Optional[int] = None
    limit: Optional[int] = None
    mode: Optional[str] = None

    def acquire(self, owner: str, wait_ms: int) -> Request:
        """The request that acquires this, waiting in the server's line up to ``wait_ms``."""
        body: dict[str, Any] = {"owner": owner, "ttl_ms": self.ttl_ms, "wait_ms": wait_ms}
        for key, value in (
            ("max_hold_ms", self.max_hold_ms),
            ("limit", self.limit),
            ("mode", self.mode),
        ):
            if value is not None:
                body[key] = value
        if self.together:
            return Request("POST", "/locks", {**body, "resources": list(self.names)})
        return Request("POST", path(self.kind, self.names[0]), body)

    def read_acquired(self, answer: Answer) -> Union[tuple[LeaseInfo, ...], NotAcquired]:
        """The leases granted (one per name, in the order asked), or why none was; raises the
        error of any other answer."""
        if answer.status != 200:
            raise problem(answer)
        body = json_object(answer)
        acquired = body.get("acquired")
        if acquired is False:
            if self.together:
                return not_acquired_together(body, self.names[0])
            return not_acquired(self.kind, body, self.names[0])
        if acquired is not True:
            raise unexpected(answer, "an acquire's answer without acquired: true or false")
        if self.together:
            leases = body.get("locks")
            if not isinstance(leases, list) or len(leases) != len(self.names):
                raise unexpected(answer, "a grant of several locks that lacks some of them")
            return tuple(lease_info(Kind.LOCK, lease) for lease in leases)
        return (lease_info(self.kind, body.get(self.kind.granted_key)),)


def path(kind: Kind, name: str) -> str:
    """The path of ``name`` in ``kind``'s namespace; a ``/`` in a name travels as ``%2F``."""
    return f"{kind.collection}/{quote(name, safe='')}"


def renew(lease: LeaseInfo, ttl_ms: int) -> Request:
    """Renews ``lease`` for ``ttl_ms`` from now, carrying its token: a newer lease of the same
    owner is never touched."""
    body = {"owner": lease.owner, "ttl_ms": ttl_ms, "fencing_token": lease.token}
    return Request("POST", path(lease.kind, lease.name) + "/renew", body)


def release(lease: LeaseInfo) -> Request:
    """Releases ``lease``, carrying its token: a late release never frees a newer lease."""
    body = {"owner": lease.owner, "fencing_token": lease.token}
    return Request("DELETE", path(lease.kind, lease.name), body)


class Refusal(str, Enum):
    """Why the server refused to renew or release a lease: it is not this holder's any more."""

    #: 404: no live lease (it expired, or was force-released).
    GONE = "gone"
    #: 403 ``forbidden``: another owner (or principal) holds it.
    TAKEN = "taken"
    #: 409 ``conflict``: this owner holds a newer lease, with another token.
    SUPERSEDED = "superseded"


def refusal(answer: Answer) -> Optional[Refusal]:
    """The refusal a renewal's or release's answer tells of, if it is one. A 403 that is about
    the caller's rights (``denied``), or a 404 that is no route, is an error, not a refusal."""
    if answer.status not in (403, 404, 409):
        return None
    kind = problem(answer)
    if not isinstance(kind, ProblemError):
        return None
    return {
        "urn:fencelock:problem:not-found": Refusal.GONE,
        "urn:fencelock:problem:forbidden": Refusal.TAKEN,
        "urn:fencelock:problem:conflict": Refusal.SUPERSEDED,
    }.get(kind.type)


def read_renewed(lease: LeaseInfo, answer: Answer) -> Union[LeaseInfo, Refusal]:
    """The lease as renewed, or the refusal; raises the error of any other answer."""
    if answer.status == 200:
        return lease_info(lease.kind, json_object(answer))
    refused = refusal(answer)
    if refused is None:
        raise problem(answer)
    return refused


def read_released(answer: Answer) -> Optional[Refusal]:
    """``None`` once released, or the refusal (the lease had already ended: not an error at
    that point); raises the error of any other answer."""
    if answer.status == 204:
        return None
    refused = refusal(answer)
    if refused is None:
        raise problem(answer)
    return refused


def json_object(answer: Answer) -> dict[str, Any]:
    """The answer's body as a JSON object."""
    try:
        body = json.loads(answer.body)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise unexpected(answer, "the body is not a JSON object")
    return body


def unexpected(answer: Answer, why: str) -> UnexpectedAnswer:
    """The error of an answer that no fencelock server sends."""
    text = answer.body[:300].decode("utf-8", "replace")
    return UnexpectedAnswer(
        f"unexpected answer from the fencelock server ({why}): HTTP {answer.status} {text}",
        answer.status,
    )


def problem(answer: Answer) -> FencelockError:
    """The error an answer that is not the call's outcome tells of: its problem, typed by its
    ``type``, or :class:`UnexpectedAnswer` if it carries no problem."""
    try:
        body = json.loads(answer.body)
    except ValueError:
        body = None
    if not isinstance(body, dict) or not all(
        isinstance(body.get(key), str) for key in ("type", "title")
    ):
        return unexpected(answer, "no problem+json body")
    errors = body.get("errors")
    fields = tuple(
        FieldError(str(e.get("field", "")), str(e.get("message", "")))
        for e in (errors if isinstance(errors, list) else [])
        if isinstance(e, dict)
    )
    cls = PROBLEM_CLASSES.get(body["type"], ProblemError)
    error = cls(
        body["type"],
        answer.status,
        body["title"],
        str(body.get("detail", "")),
        instance=body.get("instance") if isinstance(body.get("instance"), str) else None,
        errors=fields,
        body=body,
    )
    if isinstance(error, RateLimited) and answer.retry_after is not None:
        # An HTTP date is not read: the caller backs off as it would without one.
        with contextlib.suppress(ValueError):
            error.retry_after = float(answer.retry_after)
    return error


def timestamp(value: object) -> datetime:
    """An RFC 3339 timestamp as the server writes them (``2026-11-29T06:30:00.123Z``)."""
    if not isinstance(value, str):
        raise ValueError(f"not a timestamp: {value!r}")
    # Python 3.9's fromisoformat takes neither the Z nor every fraction width.
    text = value.replace("Z", "+00:00")
    main, _, zone = text.partition("+")
    if "." in main:
        whole, fraction = main.split(".", 1)
        main = f"{whole}.{fraction[:6].ljust(6, '0')}"
    return datetime.fromisoformat(f"{main}+{zone or '00:00'}").astimezone(timezone.utc)


def lease_info(kind: Kind, value: object) -> LeaseInfo:
    """A lease of ``kind`` as the server wrote it."""
    try:
        if not isinstance(value, dict):
            raise ValueError("not a JSON object")
        token = value["fencing_token"]
        if not isinstance(token, int) or isinstance(token, bool):
            raise ValueError("fencing_token is not an integer")
        hold_until = value.get("hold_until")
        limit = value.get("limit")
        return LeaseInfo(
            kind=kind,
            name=str(value[kind.name_key]),
            owner=str(value["owner"]),
            token=token,
            acquired_at=timestamp(value["acquired_at"]),
            expires_at=timestamp(value["expires_at"]),
            hold_until=timestamp(hold_until) if hold_until is not None else None,
            limit=limit if isinstance(limit, int) else None,
            mode=value.get("mode") if isinstance(value.get("mode"), str) else None,
            principal=value.get("principal") if isinstance(value.get("principal"), str) else None,
        )
    except (KeyError, ValueError) as error:
        raise UnexpectedAnswer(
            f"the server answered an invalid lease ({error}): {value!r}"
        ) from None


def seconds(body: Mapping[str, Any], key: str) -> Optional[float]:
    """A member in milliseconds, as seconds (``None`` if absent)."""
    value = body.get(key)
    return value / 1000 if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def holders(kind: Kind, value: object) -> tuple[LeaseInfo, ...]:
    """A list of leases, or one lease, as a tuple (empty if absent)."""
    if value is None or isinstance(value, int):  # a semaphore's count of holders
        return ()
    if isinstance(value, dict):
        return (lease_info(kind, value),)
    if isinstance(value, list):
        return tuple(lease_info(kind, v) for v in value)
    raise UnexpectedAnswer(f"the server answered invalid holders: {value!r}")


def not_acquired(kind: Kind, body: Mapping[str, Any], asked: str) -> NotAcquired:
    """An ``acquired: false`` answer for one name of ``kind``."""
    name = body.get(kind.name_key, asked)
    in_the_way = holders(kind, body.get("holder") or body.get("permits") or body.get("holders"))
    expires_in = seconds(body, "expires_in_ms")
    retry_in = seconds(body, "retry_in_ms")
    retry_after = seconds(body, "retry_after_ms")
    return NotAcquired(
        kind=kind,
        name=str(name),
        holders=in_the_way,
        expires_in=expires_in,
        retry_in=next((s for s in (retry_in, retry_after, expires_in) if s is not None), None),
        delayed=kind is Kind.LOCK and not in_the_way and retry_after is not None,
        shutting_down=body.get("shutting_down") is True,
        writer_waits=body.get("writer_waits") is True,
        answer=body,
    )


def not_acquired_together(body: Mapping[str, Any], first: str) -> NotAcquired:
    """An ``acquired: false`` answer for several locks asked for at once."""
    refusals = body.get("refusals")
    each = tuple(
        not_acquired(Kind.LOCK, r, first)
        for r in (refusals if isinstance(refusals, list) else [])
        if isinstance(r, dict)
    )
    return NotAcquired(
        kind=Kind.LOCK,
        name=each[0].name if each else first,
        holders=tuple(h for refusal in each for h in refusal.holders),
        retry_in=seconds(body, "retry_after_ms"),
        shutting_down=body.get("shutting_down") is True,
        in_the_way=each,
        answer=body,
    )


def names(value: Sequence[str]) -> tuple[str, ...]:
    """Names as given, each checked to be a string (the server judges the rest)."""
    if isinstance(value, str) or not all(isinstance(n, str) for n in value):
        raise TypeError(f"expected names (a list of strings), got {value!r}")
    return tuple(value)
