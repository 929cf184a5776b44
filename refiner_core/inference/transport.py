"""HTTP transport: one ``httpx.AsyncClient`` per event loop, a bound on requests in
flight, timeouts, and retries.

State that cannot cross a process or an event loop (the client, its sockets, the
semaphore, the auth headers) is created lazily on the first request in each running
loop and keyed by that loop, so a :class:`Transport` pickles to worker processes
before and after use and a forked child never reuses its parent's sockets.

The client's connections are spread over several small httpcore pools rather than one
big one: httpcore scans its whole pool for every request, so one pool of 64
connections spends most of its time in that scan at high request rates.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import tenacity

from .errors import (
    InferenceError,
    ProviderConnectionError,
    ProviderHTTPError,
    ProviderResponseError,
    body_excerpt,
    hint_for,
    scrub,
)
from .providers import Provider
from .retry import RetryPolicy, is_retryable_status, parse_retry_after, retrying
from .usage import UsageCounter

logger = logging.getLogger("refiner_core.inference")

CONNECTIONS_PER_POOL = 4
CONNECT_TIMEOUT = 10.0
_RETRYABLE_TRANSPORT_ERRORS = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)


@dataclass
class _LoopState:
    loop: asyncio.AbstractEventLoop
    client: httpx.AsyncClient
    semaphore: asyncio.Semaphore
    url: str


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
        self._pid = os.getpid()

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
        if state is not None and state.loop is loop and self._pid == os.getpid():
            return state
        with self._lock:
            if self._pid != os.getpid():  # forked: the parent's sockets are not ours
                self._states, self._pid = {}, os.getpid()
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
        headers = self.provider.headers()
        pools = _ShardedTransport(
            self.max_concurrent_requests,
            ssl_context=httpx.create_ssl_context(),
            proxy=_environment_proxy(url),
        )
        client = httpx.AsyncClient(
            transport=pools,
            headers=headers,
            timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, CONNECT_TIMEOUT)),
            follow_redirects=False,
        )
        return _LoopState(loop, client, asyncio.Semaphore(self.max_concurrent_requests), url)

    async def post(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` and return the decoded JSON object, retrying as the policy says."""
        state = self._state()
        attempts = 0
        try:
            async for attempt in retrying(self.retry, self._on_retry(state)):
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    return await self._attempt(state, body)
        except InferenceError as error:
            error.note_attempts(attempts)
            raise
        raise AssertionError("unreachable: tenacity re-raises the last error")

    async def _attempt(self, state: _LoopState, body: dict[str, Any]) -> dict[str, Any]:
        failure: InferenceError | None = None
        async with state.semaphore:
            try:
                response = await state.client.post(state.url, json=body)
            except httpx.HTTPError as exc:
                failure = self._connection_error(state, exc)
        # Raised outside the except block so the httpx error (which holds the request
        # and its auth headers) is not chained to ours.
        if failure is not None:
            raise failure
        status = response.status_code
        if 200 <= status < 300:
            try:
                data = response.json()
            except ValueError:
                data = None
            if isinstance(data, dict):
                return data
            raise self._malformed(state, response)
        raise self._http_error(state, response)

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

    def _http_error(self, state: _LoopState, response: httpx.Response) -> ProviderHTTPError:
        secrets = self.provider.secrets()
        status = response.status_code
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

    def _malformed(self, state: _LoopState, response: httpx.Response) -> ProviderResponseError:
        secrets = self.provider.secrets()
        body = body_excerpt(response.content, secrets)
        kind = response.headers.get("content-type", "no content-type")
        message = (
            f"{self._describe(state)} returned HTTP {response.status_code} with a body that "
            f"is not a JSON object ({kind}): {body!r}. Fix: check that base_url points at "
            "the provider's API and not at a proxy or web page"
        )
        return ProviderResponseError(scrub(message, secrets), body=body)

    def _on_retry(self, state: _LoopState) -> Callable[[tenacity.RetryCallState], None]:
        def note(retry_state: tenacity.RetryCallState) -> None:
            self.usage.add(retries=1)
            error = retry_state.outcome.exception() if retry_state.outcome else None
            reason = (
                f"HTTP {error.status}"
                if isinstance(error, ProviderHTTPError)
                else getattr(error, "cause", type(error).__name__)
            )
            logger.warning(
                "%s: %s (attempt %d of %d); retrying in %.2f s",
                self._describe(state),
                scrub(str(reason), self.provider.secrets()),
                retry_state.attempt_number,
                self.retry.max_attempts,
                retry_state.upcoming_sleep,
            )

        return note

    async def aclose(self) -> None:
        """Close the client of the running event loop (and forget loops that closed)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            state = self._states.pop(id(loop), None)
            for key, old in list(self._states.items()):
                if old.loop.is_closed():
                    del self._states[key]
        if state is not None and state.loop is loop:
            await state.client.aclose()


class _ShardedTransport(httpx.AsyncBaseTransport):
    """Several small httpcore pools behind one httpx transport; each request goes to
    the pool with the most free connections."""

    def __init__(self, max_connections: int, *, ssl_context: Any, proxy: str | None) -> None:
        count = max(1, math.ceil(max_connections / CONNECTIONS_PER_POOL))
        sizes = [max_connections // count + (i < max_connections % count) for i in range(count)]
        self._pools = [
            httpx.AsyncHTTPTransport(
                verify=ssl_context,
                proxy=proxy,
                limits=httpx.Limits(max_connections=size, max_keepalive_connections=size),
            )
            for size in sizes
        ]
        self._free = sizes

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        free = self._free
        index = max(range(len(free)), key=free.__getitem__)
        free[index] -= 1
        try:
            response = await self._pools[index].handle_async_request(request)
        except BaseException:
            free[index] += 1
            raise
        response.stream = _ReleasingStream(response.stream, lambda: _release(free, index))
        return response

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


def _release(free: list[int], index: int) -> None:
    free[index] += 1


class _ReleasingStream(httpx.AsyncByteStream):
    def __init__(self, inner: Any, release: Callable[[], None]) -> None:
        self._inner = inner
        self._release: Callable[[], None] | None = release

    async def __aiter__(self):  # type: ignore[override]
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            if self._release is not None:
                self._release()
                self._release = None


def _environment_proxy(url: str) -> str | None:
    """The proxy the environment (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY)
    selects for ``url``, as httpx would when it builds its own transport."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy
