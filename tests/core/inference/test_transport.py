"""The transport as the server sees it: connections reused across requests, never more
open than ``max_concurrent_requests``, retries that back off on the same connection,
and connection failures that name the URL and never the key."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest

from refiner_core.inference import (
    OpenAIResponsesProvider,
    ProviderConnectionError,
    RetryPolicy,
    generate_text,
)

from .provider_server import Fault
from .support import FAST_RETRY, everything_about, run_generate, run_rows


async def annotate(row, generate):
    return {"caption": (await generate(f"episode {row['episode']}")).text}


def make(base_url, max_concurrent_requests=64, retry=FAST_RETRY):
    provider = OpenAIResponsesProvider(model="gpt-4.1", base_url=base_url)
    return generate_text(
        fn=annotate,
        provider=provider,
        max_concurrent_requests=max_concurrent_requests,
        retry=retry,
    )


def test_requests_one_after_another_reuse_one_connection(openai_server):
    generator = make(openai_server.base_url)

    async def main():
        try:
            return [await generator({"episode": i}) for i in range(5)]
        finally:
            await generator.aclose()

    rows = asyncio.run(main())
    assert [r["caption"] for r in rows] == [f"echo: episode {i}" for i in range(5)]
    assert (openai_server.served, openai_server.connections) == (5, 1)


@pytest.mark.parametrize("bound", [1, 4, 16])
def test_never_more_connections_open_than_the_bound_and_each_is_reused(openai_server, bound):
    openai_server.set_service_time(0.02)
    generator = make(openai_server.base_url, max_concurrent_requests=bound)
    rows = run_rows(generator, [{"episode": i} for i in range(8 * bound)])  # 8 rounds

    assert len(rows) == 8 * bound
    assert openai_server.max_open_connections == bound
    assert openai_server.connections == bound


def test_bound_holds_while_requests_are_retried(openai_server):
    openai_server.set_service_time(0.01)
    openai_server.enqueue(*[Fault(status=503)] * 6, *[Fault(status=429)] * 6)
    generator = make(openai_server.base_url, max_concurrent_requests=3)
    rows = run_rows(generator, [{"episode": i} for i in range(12)])

    assert len(rows) == 12
    assert generator.usage["retries"] == 12
    assert openai_server.served == 24
    assert openai_server.max_open_connections <= 3
    assert openai_server.connections <= 3  # an error answer keeps its connection


def test_429_and_5xx_back_off_and_retry_on_the_same_connection(openai_server):
    openai_server.enqueue(Fault(status=429), Fault(status=502))
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.1, max_backoff=1.0, jitter=0)
    generator = make(openai_server.base_url, retry=policy)
    started = time.monotonic()
    assert run_generate(generator, "hi").text == "echo: hi"

    assert time.monotonic() - started >= 0.1 + 0.2  # exponential backoff, no Retry-After
    assert (openai_server.served, openai_server.connections) == (3, 1)
    assert generator.usage["retries"] == 2


def test_connect_failure_names_the_url_and_never_the_key(monkeypatch, caplog):
    leaked = "sk-live-LEAKED-connect-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", leaked)
    with socket.socket() as sock:  # a port with nothing listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    generator = make(base_url)

    with caplog.at_level(logging.DEBUG), pytest.raises(ProviderConnectionError) as caught:
        run_generate(generator, "hi")

    message = str(caught.value)
    assert f"POST {base_url}/responses failed without an HTTP answer" in message
    assert "ConnectError" in message
    assert f"gave up after {FAST_RETRY.max_attempts} attempts" in message
    assert caplog.text.count(f"POST {base_url}/responses") == FAST_RETRY.max_attempts - 1
    exposed = "\n".join([everything_about(caught.value), caplog.text, repr(generator)])
    assert leaked not in exposed
    assert leaked[:16] not in exposed
