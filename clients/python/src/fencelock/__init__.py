"""fencelock: hold a lease of a fencelock server safely, from threads or asyncio.

::

    import fencelock

    client = fencelock.Client("http://127.0.0.1:7070")
    with client.lock("payment:42", ttl=30) as lease:   # waits for it; renewed in the background
        charge(order, fencing_token=lease.token)        # the resource refuses older tokens
        if lease.lost.is_set():                         # set before anyone else can have it
            ...

A lease is renewed every third of its TTL; :attr:`~Lease.jeopardy` is true while renewals
fail, and :attr:`~Lease.lost` is set — at the latest a safety margin (a fifth of the TTL)
before the lease could pass to anyone else — when it can no longer be counted on. Leaving the
block releases it with its token, whatever left the block. ``acquired: false`` is not an
error: :meth:`LeaseRequest.acquire` returns a :class:`NotAcquired` naming the holder. Every
problem the server answers is a typed :class:`~fencelock.errors.FencelockError`.

The same with asyncio: :class:`AsyncClient`, ``async with``. The protected side of the
fencing token: :mod:`fencelock.fence`.
"""

from ._async import AsyncClient, AsyncLease, AsyncLeaseRequest
from ._common import AUTH_TOKEN_VAR, CACERT_VAR, Duration, OnLost
from ._guard import LeaseState, Loss, LostReason
from ._sync import Client, Lease, LeaseRequest
from ._wire import Kind, LeaseInfo, NotAcquired
from .errors import (
    Conflict,
    Deadlock,
    Denied,
    FencelockError,
    FieldError,
    Forbidden,
    InvalidFields,
    InvalidRequest,
    LimitMismatch,
    LostBeforeConfirmed,
    NotAcquiredError,
    NotFound,
    OutcomeUnknown,
    ProblemError,
    RateLimited,
    ServerUnreachable,
    StoreUnavailable,
    Unauthorized,
    UnexpectedAnswer,
)

__version__ = "0.1.0"

__all__ = [
    "AUTH_TOKEN_VAR",
    "CACERT_VAR",
    "AsyncClient",
    "AsyncLease",
    "AsyncLeaseRequest",
    "Client",
    "Conflict",
    "Deadlock",
    "Denied",
    "Duration",
    "FencelockError",
    "FieldError",
    "Forbidden",
    "InvalidFields",
    "InvalidRequest",
    "Kind",
    "Lease",
    "LeaseInfo",
    "LeaseRequest",
    "LeaseState",
    "LimitMismatch",
    "Loss",
    "LostBeforeConfirmed",
    "LostReason",
    "NotAcquired",
    "NotAcquiredError",
    "NotFound",
    "OnLost",
    "OutcomeUnknown",
    "ProblemError",
    "RateLimited",
    "ServerUnreachable",
    "StoreUnavailable",
    "Unauthorized",
    "UnexpectedAnswer",
]
