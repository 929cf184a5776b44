"""When and how long to retry: the retry policy and ``Retry-After`` parsing."""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""4xx statuses worth retrying; every 5xx is retried too."""


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES or status >= 500


@dataclass(frozen=True)
class RetryPolicy:
    """How ``generate`` retries 408, 409, 429, 5xx answers and connection errors.

    The wait before retry *n* (1-based) is the server's ``Retry-After`` (or
    ``retry-after-ms``) when it sent one, capped at ``max_retry_after`` and stretched
    by up to 10% so clients do not retry in lockstep; otherwise
    ``initial_backoff * 2**(n-1)`` plus up to ``jitter`` seconds, capped at
    ``max_backoff``. Other 4xx answers are never retried.

    >>> policy = RetryPolicy(max_attempts=3, initial_backoff=0.1)
    >>> policy.max_attempts
    3
    """

    max_attempts: int = 6
    """Attempts per request, the first included (1 disables retries)."""
    initial_backoff: float = 1.0
    """Seconds before the first retry when the server gives no Retry-After."""
    max_backoff: float = 60.0
    """Upper bound for the exponential backoff, in seconds."""
    jitter: float = 1.0
    """Random seconds (0 to this) added to each exponential backoff."""
    max_retry_after: float = 300.0
    """Longest server-requested wait honoured, in seconds."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError(
                f"RetryPolicy.max_attempts must be an integer >= 1, got {self.max_attempts!r}"
            )
        for name in ("initial_backoff", "max_backoff", "jitter", "max_retry_after"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value < 0:
                raise ValueError(f"RetryPolicy.{name} must be a number >= 0, got {value!r}")

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based) when the
        server did not say."""
        base = min(self.max_backoff, self.initial_backoff * 2 ** (attempt - 1))
        return min(self.max_backoff, base + random.uniform(0, self.jitter))

    def honour(self, retry_after: float) -> float:
        """Seconds to wait when the server asked for ``retry_after`` seconds."""
        wait = min(max(retry_after, 0.0), self.max_retry_after)
        return wait * random.uniform(1.0, 1.1)

    def wait_for(self, attempt: int, error: BaseException | None) -> float:
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            return self.honour(retry_after)
        return self.backoff(attempt)


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds the server asks to wait, from ``retry-after-ms`` (OpenAI) or
    ``Retry-After`` (delay-seconds or an HTTP date); ``None`` if absent or unreadable.

    >>> parse_retry_after({"retry-after": "2"})
    2.0
    >>> parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0)
    10.0
    """
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        try:
            return max(float(milliseconds) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    now = time.time() if now is None else now
    return max(when.timestamp() - now, 0.0)
