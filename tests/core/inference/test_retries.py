"""Retries of 408/409/429/5xx and connection errors, Retry-After, timeouts, no retry on 4xx."""

from __future__ import annotations

import socket
import time
from email.utils import formatdate

import pytest

from refiner_core.inference import (
    OpenAIResponsesProvider,
    ProviderConnectionError,
    ProviderHTTPError,
    RetryPolicy,
    generate_text,
)

from .provider_server import Fault
from .support import FAST_RETRY, run_generate


async def passthrough(row, generate):
    return row


def make(server, retry=FAST_RETRY, **kwargs):
    provider = OpenAIResponsesProvider(model="gpt-4.1", base_url=server.base_url)
    return generate_text(fn=passthrough, provider=provider, retry=retry, **kwargs)


def test_429_honours_retry_after_seconds(openai_server):
    # Backoff alone would wait ~0.01 s; the server asks for 1 s.
    openai_server.enqueue(Fault(status=429, headers={"Retry-After": "1"}))
    generator = make(openai_server)
    started = time.monotonic()
    response = run_generate(generator, "hi")
    elapsed = time.monotonic() - started

    assert response.text == "echo: hi"
    assert elapsed >= 1.0
    assert elapsed < 3.0
    assert openai_server.served == 2
    assert generator.usage["retries"] == 1
    assert generator.usage["requests_ok"] == 1


def test_429_honours_retry_after_http_date(openai_server):
    # An HTTP date has whole-second resolution: now + 2 s is at least 1 s away.
    retry_at = formatdate(time.time() + 2, usegmt=True)
    openai_server.enqueue(Fault(status=429, headers={"Retry-After": retry_at}))
    started = time.monotonic()
    run_generate(make(openai_server), "hi")
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 4.0
    assert openai_server.served == 2


def test_retry_after_ms_takes_precedence(openai_server):
    openai_server.enqueue(Fault(status=503, headers={"retry-after-ms": "300", "Retry-After": "30"}))
    started = time.monotonic()
    run_generate(make(openai_server), "hi")
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 2.0


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504])
def test_retryable_statuses_are_retried(openai_server, status):
    openai_server.enqueue(Fault(status=status), Fault(status=status))
    generator = make(openai_server)
    assert run_generate(generator, "hi").text == "echo: hi"
    assert openai_server.served == 3
    assert generator.usage == {
        "requests_ok": 1,
        "requests_failed": 0,
        "retries": 2,
        "input_tokens": 1,
        "output_tokens": 2,
    }


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_other_4xx_are_not_retried(openai_server, status):
    openai_server.enqueue(Fault(status=status))
    generator = make(openai_server)
    with pytest.raises(ProviderHTTPError) as caught:
        run_generate(generator, "hi")
    error = caught.value
    assert error.status == status
    assert error.retryable is False
    assert f"HTTP {status} (not retried)" in str(error)
    assert "injected HTTP" in error.body
    assert "Fix:" in str(error)
    assert openai_server.served == 1
    assert generator.usage["retries"] == 0
    assert generator.usage["requests_failed"] == 1


def test_400_from_request_validation_names_the_problem(openai_server):
    # The server checks the request shape; an empty input list is a real 400.
    generator = make(openai_server)
    with pytest.raises(ProviderHTTPError) as caught:
        run_generate(generator, [{"role": "robot", "content": "beep"}])
    assert caught.value.status == 400
    assert "invalid 'input'" in caught.value.body
    assert "check the model name, the messages and the generation parameters" in str(caught.value)


def test_gives_up_after_max_attempts_with_status_and_body(openai_server):
    openai_server.enqueue(*[Fault(status=500, body=b'{"error": "overloaded"}')] * 5)
    generator = make(
        openai_server, retry=RetryPolicy(max_attempts=3, initial_backoff=0.01, jitter=0)
    )
    with pytest.raises(ProviderHTTPError) as caught:
        run_generate(generator, "hi")
    assert caught.value.status == 500
    assert caught.value.body == '{"error": "overloaded"}'
    assert "gave up after 3 attempts" in str(caught.value)
    assert openai_server.served == 3
    assert generator.usage["retries"] == 2
    assert generator.usage["requests_failed"] == 1


def test_exponential_backoff_between_attempts(openai_server):
    openai_server.enqueue(Fault(status=500), Fault(status=500), Fault(status=500))
    policy = RetryPolicy(max_attempts=4, initial_backoff=0.1, max_backoff=1.0, jitter=0)
    started = time.monotonic()
    run_generate(make(openai_server, retry=policy), "hi")
    # 0.1 + 0.2 + 0.4 seconds of backoff.
    assert 0.7 <= time.monotonic() - started < 2.5


def test_long_error_bodies_are_trimmed(openai_server):
    openai_server.enqueue(Fault(status=400, body=b"x" * 5000))
    with pytest.raises(ProviderHTTPError) as caught:
        run_generate(make(openai_server), "hi")
    assert caught.value.body.startswith("x" * 500 + "... [4500 more characters]")
    assert len(str(caught.value)) < 1000


def test_dropped_connection_is_retried(openai_server):
    openai_server.enqueue(Fault(disconnect=True))
    generator = make(openai_server)
    assert run_generate(generator, "hi").text == "echo: hi"
    assert generator.usage["retries"] == 1


def test_slow_response_times_out_then_retries(openai_server):
    openai_server.enqueue(Fault(delay=3.0))
    generator = make(openai_server, timeout=0.2)
    started = time.monotonic()
    assert run_generate(generator, "hi").text == "echo: hi"
    assert time.monotonic() - started < 2.0  # did not wait for the slow answer
    assert generator.usage["retries"] == 1


def test_timeout_error_says_how_to_fix(openai_server):
    openai_server.enqueue(Fault(delay=1.0), Fault(delay=1.0))
    generator = make(
        openai_server, timeout=0.2, retry=RetryPolicy(max_attempts=2, initial_backoff=0, jitter=0)
    )
    with pytest.raises(ProviderConnectionError) as caught:
        run_generate(generator, "hi")
    message = str(caught.value)
    assert "ReadTimeout" in message
    assert "raise timeout= (now 0.2 s)" in message
    assert "gave up after 2 attempts" in message


def test_connection_refused_is_retried_then_raised():
    with socket.socket() as sock:  # a port with nothing listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = OpenAIResponsesProvider(model="gpt-4.1", base_url=f"http://127.0.0.1:{port}/v1")
    generator = generate_text(fn=passthrough, provider=provider, retry=FAST_RETRY)
    with pytest.raises(ProviderConnectionError) as caught:
        run_generate(generator, "hi")
    assert "ConnectError" in str(caught.value)
    assert "check that the server at base_url is running" in str(caught.value)
    assert generator.usage["retries"] == FAST_RETRY.max_attempts - 1


def test_retries_are_logged_without_body(openai_server, caplog):
    openai_server.enqueue(Fault(status=503))
    with caplog.at_level("WARNING", logger="refiner_core.inference"):
        run_generate(make(openai_server), "hi")
    (record,) = [r for r in caplog.records if r.name == "refiner_core.inference"]
    assert "HTTP 503 (attempt 1 of 4); retrying in" in record.getMessage()
