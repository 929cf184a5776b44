"""HTTP transport: one connection pool per event loop, a bound on requests in
flight, timeouts, and retries.

State that cannot cross a process or an event loop (the client, its sockets, the
semaphore, the auth headers) is created lazily on the first request in each running
loop and keyed by that loop, so a :class:`Transport` pickles to worker processes
before and after use and a forked child never reuses its parent's sockets.

Attempts go through an httpx transport, one per event loop:
:class:`~.http1.Http1Transport` (a lean HTTP/1.1 connection pool, called through its
``exchange`` method) or, when the environment configures a proxy for the endpoint,
httpx's own transport with ``httpx.Request``/``httpx.Response``. Failures are httpx's
exception types either way. ``httpx.AsyncClient`` is not in the path: its connection
pool costs milliseconds of CPU per request once it holds tens of connections (see
:mod:`.http1` for the measurements), and its URL merging, cookie jar and redirect
handling serve nothing here (one fixed URL, no cookies, no redirects).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

import httpx

from .errors import (
    InferenceError,
    ProviderConnectionError,
    ProviderHTTPError,
    ProviderResponseError,
    body_excerpt,
    hint_for,
    scrub,
)
from .http1 import Answer, Http1Transport
from .process import current_pid
from .providers import Provider
from .retry import RetryPolicy, is_retryable_status, parse_retry_after
from .usage import UsageCounter

logger = logging.getLogger("refiner_core.inference")

CONNECT_TIMEOUT = 10.0
_RETRYABLE_TRANSPORT_ERRORS = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)


@dataclass
class _LoopState:
    loop: asyncio.AbstractEventLoop
    http: httpx.AsyncBaseTransport
    semaphore: asyncio.Semaphore
    url: httpx.URL
    headers: list[tuple[bytes, bytes]]  # every header but Content-Length, Host first
    timeouts: dict[str, float | None]  # httpx's per-phase timeouts (None: no limit)


class Transport:
    """POSTs JSON to a provider with bounded concurrency and retries.

    ``max_concurrent_requests`` bounds requests in flight per event loop (retries
    waiting out their backoff do not hold a slot). ``timeout`` is the per-attempt
    read/write timeout in seconds (connecting is capped at 10 s).
    """

    def __init__(
        self,
        provider: Provider,
        *,
        max_concurrent_requests: int,
        timeout: float,
        retry: RetryPolicy,
        usage: UsageCounter,
    ) -> None:
        self.provider = provider
        self.max_concurrent_requests = max_concurrent_requests
        self.timeout = timeout
        self.retry = retry
        self.usage = usage
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._states: dict[int, _LoopState] = {}
        self._lock = threading.Lock()
        self._pid = current_pid()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_states", "_lock", "_pid"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._states.get(id(loop))
        if state is not None and state.loop is loop and self._pid == current_pid():
            return state
        with self._lock:
            if self._pid != current_pid():  # forked: the parent's sockets are not ours
                self._states, self._pid = {}, current_pid()
            for key, old in list(self._states.items()):
                if old.loop.is_closed() or old.loop is loop:
                    del self._states[key]
            state = self._open(loop)
            self._states[id(loop)] = state
            return state

    def _open(self, loop: asyncio.AbstractEventLoop) -> _LoopState:
        url = self.provider.endpoint()
        if not url.startswith(("http://", "https://")):
            raise ValueError(
                f"{self.provider!r}: endpoint {url!r} is not an http(s) URL; set base_url "
                "to something like 'http://localhost:8000/v1'"
            )
        headers = httpx.Headers(
            {
                "accept": "application/json",
                "accept-encoding": "gzip, deflate",
                "user-agent": f"refiner python-httpx/{httpx.__version__}",
                **self.provider.headers(),
            }
        )
        timeout = httpx.Timeout(self.timeout, connect=min(self.timeout, CONNECT_TIMEOUT))
        request_url = httpx.URL(url)
        return _LoopState(
            loop=loop,
            http=self._http_transport(url),
            semaphore=asyncio.Semaphore(self.max_concurrent_requests),
            url=request_url,
            headers=[(b"host", request_url.netloc), *headers.raw],
            timeouts=timeout.as_dict(),
        )

    def _http_transport(self, url: str) -> httpx.AsyncBaseTransport:
        proxy = _environment_proxy(url)
        if proxy is None:
            return Http1Transport(max_idle_per_origin=self.max_concurrent_requests)
        size = self.max_concurrent_requests
        limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
        return httpx.AsyncHTTPTransport(proxy=proxy, limits=limits)

    async def post(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` and return the decoded JSON object, retrying as the policy says."""
        state = self._state()
        content = _encode_json(self.provider, body)
        attempt = 1
        while True:
            try:
                return await self._attempt(state, content)
            except InferenceError as error:
                if not error.retryable or attempt >= self.retry.max_attempts:
                    error.note_attempts(attempt)
                    raise
                wait = self.retry.wait_for(attempt, error)
                self._note_retry(state, attempt, error, wait)
            await asyncio.sleep(wait)  # outside the except: no semaphore slot, no traceback held
            attempt += 1

    async def _attempt(self, state: _LoopState, content: bytes) -> dict[str, Any]:
        failure: InferenceError | None = None
        async with state.semaphore:
            try:
                answer = await self._send(state, content)
            except httpx.HTTPError as exc:
                failure = self._connection_error(state, exc)
        # Raised outside the except block so the httpx error (which holds the request
        # and its auth headers) is not chained to ours.
        if failure is not None:
            raise failure
        status = answer.status
        if 200 <= status < 300:
            try:
                data = json.loads(answer.content)
            except ValueError:
                data = None
            if isinstance(data, dict):
                return data
            raise self._malformed(state, answer)
        raise self._http_error(state, answer)

    async def _send(self, state: _LoopState, content: bytes) -> Answer:
        http = state.http
        if isinstance(http, Http1Transport):
            headers = [*state.headers, (b"content-length", b"%d" % len(content))]
            return await http.exchange("POST", state.url, headers, content, state.timeouts)
        request = httpx.Request(
            "POST",
            state.url,
            headers=state.headers,
            content=content,
            extensions={"timeout": state.timeouts},
        )
        response = await http.handle_async_request(request)
        try:
            await response.aread()
        finally:
            await response.aclose()
        return Answer(response.status_code, response.headers.raw, response.content, "", False)

    def _describe(self, state: _LoopState) -> str:
        return f"{self.provider!r}: POST {state.url}"

    def _connection_error(self, state: _LoopState, exc: httpx.HTTPError) -> InferenceError:
        secrets = self.provider.secrets()
        cause = scrub(f"{type(exc).__name__}: {exc}", secrets)
        retryable = isinstance(exc, _RETRYABLE_TRANSPORT_ERRORS)
        if isinstance(exc, httpx.TimeoutException):
            fix = f"the provider did not answer in time; raise timeout= (now {self.timeout} s)"
        elif retryable:
            fix = "check that the server at base_url is running and reachable"
        else:
            fix = "check base_url and any proxy settings"
        error = ProviderConnectionError(
            scrub(
                f"{self._describe(state)} failed without an HTTP answer ({cause}): {fix}", secrets
            ),
            cause=cause,
        )
        error.retryable = retryable
        return error

    def _http_error(self, state: _LoopState, response: Answer) -> ProviderHTTPError:
        secrets = self.provider.secrets()
        status = response.status
        retryable = is_retryable_status(status)
        body = body_excerpt(response.content, secrets)
        note = "" if retryable else " (not retried)"
        hint = hint_for(status, self.provider.api_key_env)
        message = f"{self._describe(state)} returned HTTP {status}{note}: {body!r}. Fix: {hint}"
        return ProviderHTTPError(
            scrub(message, secrets),
            status=status,
            body=body,
            retry_after=parse_retry_after(response.headers) if retryable else None,
            retryable=retryable,
        )

    def _malformed(self, state: _LoopState, response: Answer) -> ProviderResponseError:
        secrets = self.provider.secrets()
        body = body_excerpt(response.content, secrets)
        kind = response.headers.get("content-type", "no content-type")
        message = (
            f"{self._describe(state)} returned HTTP {response.status} with a body that "
            f"is not a JSON object ({kind}): {body!r}. Fix: check that base_url points at "
            "the provider's API and not at a proxy or web page"
        )
        return ProviderResponseError(scrub(message, secrets), body=body)

    def _note_retry(
        self, state: _LoopState, attempt: int, error: InferenceError, wait: float
    ) -> None:
        self.usage.add(retries=1)
        reason = (
            f"HTTP {error.status}"
            if isinstance(error, ProviderHTTPError)
            else getattr(error, "cause", type(error).__name__)
        )
        logger.warning(
            "%s: %s (attempt %d of %d); retrying in %.2f s",
            self._describe(state),
            scrub(str(reason), self.provider.secrets()),
            attempt,
            self.retry.max_attempts,
            wait,
        )

    async def aclose(self) -> None:
        """Close the client of the running event loop (and forget loops that closed)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            state = self._states.pop(id(loop), None)
            for key, old in list(self._states.items()):
                if old.loop.is_closed():
                    del self._states[key]
        if state is not None and state.loop is loop:
            await state.http.aclose()


def _encode_json(provider: Provider, body: dict[str, Any]) -> bytes:
    try:
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{provider!r}: the request body cannot be sent as JSON ({exc}); pass only "
            "str, int, float (not NaN or infinity), bool, None, list and dict values in "
            "messages and generation params"
        ) from None
    return text.encode("utf-8")


def _environment_proxy(url: str) -> str | None:
    """The proxy the environment (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY)
    selects for ``url``, as httpx would when it builds its own transport."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy
