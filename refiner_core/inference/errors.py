"""Errors raised by the inference helpers, and the scrubbing that keeps API keys out of them.

Every error message names the provider, the endpoint, what went wrong and how to fix
it. Messages and bodies pass through :func:`scrub` before an error is built, so an API
key echoed back by a server never reaches a log, a traceback or run metadata.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ..errors import RefinerError

BODY_LIMIT = 500
"""How many characters of a provider's response body an error keeps."""

_MASK = "***"


def _escaped_pattern(secret: str) -> re.Pattern[str]:
    """``secret`` with each character literal or JSON-escaped (``\\u0073``, ``\\/``)."""
    parts = []
    for ch in secret:
        options = [re.escape(ch)]
        if ord(ch) < 0x10000:
            hex_digits = "".join(
                f"[{d}{d.upper()}]" if d.isalpha() else d for d in f"{ord(ch):04x}"
            )
            options.append(r"\\u" + hex_digits)
        if ch == "/":
            options.append(r"\\/")
        parts.append(f"(?:{'|'.join(options)})")
    return re.compile("".join(parts))


def scrub(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of each secret in ``text`` with ``***``, also when a
    server echoed it JSON-escaped (``\\u0073\\u006b-...``).

    >>> scrub("bad key sk-123456", ["sk-123456"])
    'bad key ***'
    >>> scrub('{"key": "\\\\u0073\\\\u006B-123456"}', ["sk-123456"])
    '{"key": "***"}'
    """
    for secret in secrets:
        if secret:
            text = text.replace(secret, _MASK)
            if "\\" in text:
                text = _escaped_pattern(secret).sub(_MASK, text)
    return text


def trim(text: str, limit: int = BODY_LIMIT) -> str:
    """Cut ``text`` to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"


def body_excerpt(body: bytes | str, secrets: Iterable[str]) -> str:
    """A response body as scrubbed, trimmed text (scrubbed before trimming, so a key
    cut in half by the trim cannot survive)."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    return trim(scrub(body, secrets))


class InferenceError(RefinerError, RuntimeError):
    """Base class of every error raised by ``refiner_core.inference``.

    Errors keep a single message argument so they pickle across worker processes;
    details live in attributes.
    """

    retryable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    def note_attempts(self, attempts: int) -> None:
        """Record how many attempts were made (the message says so when more than one)."""
        self.attempts = attempts
        if attempts > 1:
            self.args = (f"{self.message} (gave up after {attempts} attempts)",)


class MissingAPIKeyError(InferenceError):
    """The environment variable that should hold the provider's API key is not set."""

    def __init__(self, message: str, *, env_var: str = "") -> None:
        super().__init__(message)
        self.env_var = env_var


class ProviderHTTPError(InferenceError):
    """The provider answered with a non-2xx status.

    ``status`` is the HTTP status, ``body`` the scrubbed response body trimmed to
    500 characters, ``retry_after`` the server's requested wait in seconds (if any).
    408, 409, 429 and 5xx are retried before this is raised; other 4xx are not.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        body: str = "",
        retry_after: float | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.retry_after = retry_after
        self.retryable = retryable


class ProviderConnectionError(InferenceError):
    """The request did not get an HTTP answer: connection refused or reset, timeout.
    Retried before this is raised."""

    retryable = True

    def __init__(self, message: str, *, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause


class ProviderResponseError(InferenceError):
    """The provider answered 2xx but the body is not what its API promises: malformed
    JSON, no text output, a refusal. Not retried. ``body`` is scrubbed and trimmed."""

    def __init__(self, message: str, *, body: str = "") -> None:
        super().__init__(message)
        self.body = body


class StructuredOutputError(InferenceError):
    """The model's text did not validate against the requested pydantic ``schema``.

    ``text`` is the model's full text (scrubbed), ``schema`` the schema's name and
    ``errors`` pydantic's error list.
    """

    def __init__(
        self, message: str, *, text: str = "", schema: str = "", errors: Any = None
    ) -> None:
        super().__init__(message)
        self.text = text
        self.schema = schema
        self.errors = errors or []


HINTS = {
    400: "the provider rejected the request: check the model name, the messages and "
    "the generation parameters",
    401: "the API key was refused: check the key in ${env}",
    403: "the API key lacks access to this model or endpoint: check the key in ${env}",
    404: "no such endpoint or model: check base_url and the model name",
    413: "the request is too large: send less text per request",
    422: "the provider could not process the request: check the generation parameters",
    429: "rate limited: lower max_concurrent_requests, or allow more retries",
}


def hint_for(status: int, env_var: str | None) -> str:
    """How to fix a request that ended with HTTP ``status``."""
    if status in HINTS:
        hint = HINTS[status]
    elif status >= 500:
        hint = "the provider failed: retry later or reduce the load"
    elif status in (408, 409):
        hint = "the provider kept timing out or conflicting: retry later"
    else:
        hint = "see the response body"
    return hint.replace("${env}", f"${env_var}" if env_var else "the provider's key variable")
