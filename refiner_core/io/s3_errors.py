"""S3 errors that say what failed: the operation, the object, how many attempts were made.

s3fs turns a final ``ClientError`` into ``OSError(errno, "<server message>")``; after
botocore's retries that reads ``We encountered an internal error`` and nothing more.
:func:`with_s3_context` builds an error of the same type (so ``FileNotFoundError``
and ``PermissionError`` stay what they are) whose message names the S3 operation, the
``s3://bucket/key``, the HTTP status and the attempts made, with the original as its
``__cause__``.

Example:
    >>> error = with_s3_context(OSError(121, "We encountered an internal error"),
    ...                         operation="UploadPart 2", url="s3://bucket/out/a.bin")
    >>> str(error)
    '[Errno 121] S3 UploadPart 2 of s3://bucket/out/a.bin failed: We encountered an internal error'
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

_MARK = "_refiner_s3_context"


def _client_error(exc: BaseException) -> Any:
    """The botocore ``ClientError`` behind ``exc``, if any."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 8:
        if hasattr(current, "response") and hasattr(current, "operation_name"):
            return current
        current = current.__cause__ or current.__context__
        seen += 1
    return None


def _attempts(exc: BaseException, retries: int | None) -> str | None:
    """How many requests the failed call made: botocore's count (``RetryAttempts`` + 1)
    for a server error; s3fs's tries for a connection error, which s3fs retries itself."""
    client_error = _client_error(exc)
    if client_error is not None:
        metadata = (client_error.response or {}).get("ResponseMetadata", {})
        if "RetryAttempts" not in metadata:
            return None
        n = int(metadata["RetryAttempts"]) + 1
        return f"{n} attempt{'s' if n != 1 else ''}"
    return f"{retries} tries by s3fs" if retries else None


def _from_client_library(exc: BaseException) -> bool:
    return type(exc).__module__.split(".", 1)[0] in ("botocore", "aiobotocore", "aiohttp")


def with_s3_context(
    exc: BaseException, *, operation: str, url: str, retries: int | None = None
) -> BaseException:
    """An error like ``exc`` naming ``operation``, ``url`` and the attempts; ``exc`` itself
    when it is neither an ``OSError`` nor a botocore/aiohttp error, or already carries
    the context. Connection errors of those libraries become an ``OSError``."""
    if getattr(exc, _MARK, False) or not (isinstance(exc, OSError) or _from_client_library(exc)):
        return exc
    client_error = _client_error(exc)
    status = None
    if client_error is not None:
        status = (client_error.response or {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
    attempts = _attempts(exc, retries)
    if isinstance(exc, OSError) and exc.strerror:
        detail = exc.strerror
    else:
        detail = str(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
    message = f"S3 {operation} of {url} failed"
    if status is not None:
        message += f" with HTTP {status}"
    if attempts is not None:
        message += f" after {attempts}"
    message += f": {detail}"
    errno_ = exc.errno if isinstance(exc, OSError) else None
    kind = type(exc) if isinstance(exc, OSError) else OSError
    try:
        error = kind(errno_, message) if errno_ is not None else kind(message)
    except TypeError:
        error = OSError(errno_, message) if errno_ is not None else OSError(message)
    setattr(error, _MARK, True)
    error.__cause__ = exc
    return error


@contextlib.contextmanager
def s3_context(operation: str, url: str, *, retries: int | None = None) -> Iterator[None]:
    """Re-raise an S3 error from the block with :func:`with_s3_context` applied."""
    try:
        yield
    except Exception as exc:
        error = with_s3_context(exc, operation=operation, url=url, retries=retries)
        if error is exc:
            raise
        raise error from exc
