"""Every failure a fencelock call can raise.

The server answers every refusal with an RFC 9457 ``application/problem+json`` body; each
becomes a :class:`ProblemError` of the class its ``type`` names (never its status alone: a
409 is a ``conflict``, a ``limit-mismatch`` or a ``deadlock``), carrying ``type``,
``status``, ``title``, ``detail`` and, for a 422, the invalid ``errors``.

Two kinds of failure leave the outcome unknown — the request may or may not have been
carried out — and share the base :class:`OutcomeUnknown`: a server that cannot be reached or
does not answer in time (:class:`ServerUnreachable`), and a 503 (:class:`StoreUnavailable`).
A retried acquire by the same owner is safe (it extends); read the lease before retrying a
release.

Contention is not a failure: an acquire that is not granted returns a
:class:`~fencelock.NotAcquired`. Only a ``with`` block, which cannot be skipped otherwise,
raises it as :class:`NotAcquiredError`, which is no :class:`FencelockError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Optional

if TYPE_CHECKING:
    from ._guard import Loss
    from ._wire import LeaseInfo, NotAcquired

__all__ = [
    "Conflict",
    "Deadlock",
    "Denied",
    "FencelockError",
    "FieldError",
    "Forbidden",
    "InvalidFields",
    "InvalidRequest",
    "LimitMismatch",
    "LostBeforeConfirmed",
    "NotAcquiredError",
    "NotFound",
    "OutcomeUnknown",
    "ProblemError",
    "RateLimited",
    "ServerUnreachable",
    "StoreUnavailable",
    "Unauthorized",
    "UnexpectedAnswer",
]

PROBLEM_PREFIX = "urn:fencelock:problem:"


class FencelockError(Exception):
    """Base of every failure of a fencelock call."""


class OutcomeUnknown(FencelockError):
    """The request may or may not have been carried out: read before retrying a release."""


class ServerUnreachable(OutcomeUnknown):
    """The server could not be reached, the TLS handshake failed, or no answer came in time."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        #: Whether the request's time limit ended it (the server may be slow, not gone).
        self.timed_out = timed_out


class UnexpectedAnswer(OutcomeUnknown):
    """An answer no fencelock server sends (e.g. a proxy's error page): nothing is known."""

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(message)
        #: The HTTP status of the answer, if there was one.
        self.status = status


@dataclass(frozen=True)
class FieldError:
    """One invalid field of a request, as a 422 lists it."""

    #: A body member (``owner``, ``ttl_ms``, …), or ``resource`` for the name in the path.
    field: str
    #: What is wrong with it, e.g. ``must be a JSON integer from 1 to 86400000``.
    message: str


class ProblemError(FencelockError):
    """An ``application/problem+json`` answer; the subclass says which ``type`` it is."""

    #: The ``type`` slug this class stands for (``None``: any other type).
    SLUG: ClassVar[Optional[str]] = None

    def __init__(
        self,
        type: str,
        status: int,
        title: str,
        detail: str,
        *,
        instance: Optional[str] = None,
        errors: tuple[FieldError, ...] = (),
        body: Optional[Mapping[str, Any]] = None,
    ) -> None:
        words = "; ".join(f"{e.field}: {e.message}" for e in errors) or detail
        super().__init__(f"{title} ({status} {type}): {words}")
        #: The problem's type URI, e.g. ``urn:fencelock:problem:forbidden``.
        self.type = type
        #: The HTTP status code.
        self.status = status
        #: The short summary, the same for every problem of a type.
        self.title = title
        #: What happened this time.
        self.detail = detail
        #: The request path the problem is about.
        self.instance = instance
        #: For a 422: every invalid field.
        self.errors = errors
        #: The whole problem body, members this client does not know included.
        self.body: Mapping[str, Any] = body if body is not None else {}


class InvalidRequest(ProblemError):
    """The server refused the request as invalid (400, 413, 415, 422): nothing changed."""

    SLUG = "bad-request"


class InvalidFields(InvalidRequest):
    """422: one or more fields are invalid; :attr:`errors` lists each."""

    SLUG = "invalid-fields"


class Unauthorized(ProblemError):
    """401: the server needs a bearer token (``auth_token=``) and got none, or an unknown one."""

    SLUG = "unauthorized"


class Denied(ProblemError):
    """403: the caller's principal lacks the right this request needs on this name."""

    SLUG = "denied"


class Forbidden(ProblemError):
    """403: another owner (or principal) holds the live lease."""

    SLUG = "forbidden"


class NotFound(ProblemError):
    """404: no live lease."""

    SLUG = "not-found"


class Conflict(ProblemError):
    """409: the fencing token given is not the current lease's."""

    SLUG = "conflict"


class LimitMismatch(ProblemError):
    """409: the semaphore's live permits carry another limit than the one asked for."""

    SLUG = "limit-mismatch"

    @property
    def limit(self) -> Optional[int]:
        """The limit the live permits carry."""
        limit = self.body.get("limit")
        return limit if isinstance(limit, int) else None


class Deadlock(ProblemError):
    """409: waiting would close a cycle of owners that wait for each other.

    Nothing was acquired and nothing the owner holds was released; :attr:`detail` names the
    cycle, as far as the caller may read it.
    """

    SLUG = "deadlock"


class RateLimited(ProblemError):
    """429: the caller's principal sent more requests than its rate allows."""

    SLUG = "too-many-requests"

    #: Seconds to wait before asking again, from ``Retry-After`` (``None`` if absent).
    retry_after: Optional[float] = None


class StoreUnavailable(ProblemError, OutcomeUnknown):
    """503: the server's store is unreachable or failing; the outcome is unknown."""

    SLUG = "store-unavailable"


#: The class of every problem type this client tells apart, by its URI.
PROBLEM_CLASSES: Mapping[str, type[ProblemError]] = {
    PROBLEM_PREFIX + cls.SLUG: cls
    for cls in (
        InvalidRequest,
        InvalidFields,
        Unauthorized,
        Denied,
        Forbidden,
        NotFound,
        Conflict,
        LimitMismatch,
        Deadlock,
        RateLimited,
        StoreUnavailable,
    )
    if cls.SLUG is not None
} | {
    PROBLEM_PREFIX + slug: InvalidRequest
    for slug in ("payload-too-large", "unsupported-media-type")
}


class LostBeforeConfirmed(FencelockError):
    """The lease was granted late (after a wait), and refused by the renewal that confirms it.

    It expired, was force-released, or passed to another owner before the guard could start:
    nothing is held (any other lease taken with it was given back).
    """

    def __init__(self, info: LeaseInfo, loss: Loss) -> None:
        super().__init__(
            f"the lease on {info.name!r} (fencing token {info.token}) was lost before it "
            f"could be confirmed: {loss}"
        )
        #: The lease as granted.
        self.info = info
        #: What the refusal says happened to it.
        self.loss = loss


class NotAcquiredError(Exception):
    """Raised on entering a ``with`` block whose lock was not acquired within ``wait``.

    Contention, not a failure (so no :class:`FencelockError`): :attr:`not_acquired` says who
    holds it and for how long. Outside a ``with`` block, ``acquire()`` returns that value.
    """

    def __init__(self, not_acquired: NotAcquired) -> None:
        super().__init__(str(not_acquired))
        #: Who holds what was asked for, and when asking again may be answered otherwise.
        self.not_acquired = not_acquired
