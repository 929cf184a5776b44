"""API keys never leak; malformed responses and missing keys are clear errors."""

from __future__ import annotations

import logging
import pickle

import pytest

from refiner_core.inference import (
    AnthropicProvider,
    InferenceError,
    MissingAPIKeyError,
    OpenAIResponsesProvider,
    ProviderHTTPError,
    ProviderResponseError,
    generate_text,
    usage_snapshot,
)

from .provider_server import Fault
from .support import ANTHROPIC_KEY, FAST_RETRY, OPENAI_KEY, everything_about, run_generate


async def passthrough(row, generate):
    return row


def test_openai_key_never_appears_in_errors_logs_or_reprs(openai_server, monkeypatch, caplog):
    # The server expects another key and, like the real API, echoes what it got.
    leaked = "sk-live-LEAKED-abcdef0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", leaked)
    echo = f'{{"error": {{"message": "rate limited for key {leaked}"}}}}'.encode()
    openai_server.enqueue(Fault(status=429, body=echo), Fault(status=500, body=echo))
    provider = OpenAIResponsesProvider(model="gpt-4.1", base_url=openai_server.base_url)
    generator = generate_text(fn=passthrough, provider=provider, retry=FAST_RETRY)

    with caplog.at_level(logging.DEBUG), pytest.raises(ProviderHTTPError) as caught:
        run_generate(generator, "hi")

    error = caught.value
    assert error.status == 401
    assert "Incorrect API key provided: Bearer ***" in error.body
    exposed = "\n".join(
        [
            everything_about(error),
            caplog.text,
            repr(generator),
            repr(provider),
            pickle.dumps(generator).decode("latin-1"),
            pickle.dumps(provider).decode("latin-1"),
            repr(generator.usage),
            repr(usage_snapshot()),
        ]
    )
    assert leaked not in exposed
    assert leaked[:20] not in exposed
    assert "retrying in" in caplog.text  # the 429 and 500 were retried and logged


def test_anthropic_key_never_appears(anthropic_server, monkeypatch):
    leaked = "sk-ant-LEAKED-0123456789"
    monkeypatch.setenv("ANTHROPIC_API_KEY", leaked)
    provider = AnthropicProvider(model="claude-sonnet-4-5", base_url=anthropic_server.root_url)
    generator = generate_text(fn=passthrough, provider=provider, retry=FAST_RETRY)
    with pytest.raises(ProviderHTTPError) as caught:
        run_generate(generator, "hi")
    assert caught.value.status == 401
    assert "invalid x-api-key: ***" in caught.value.body
    assert "check the key in $ANTHROPIC_API_KEY" in str(caught.value)
    assert leaked not in everything_about(caught.value)
    assert ANTHROPIC_KEY not in everything_about(caught.value)


def test_key_is_not_held_by_provider_or_generator_before_use():
    provider = OpenAIResponsesProvider(model="gpt-4.1")
    generator = generate_text(fn=passthrough, provider=provider)
    for blob in (repr(provider), repr(generator), pickle.dumps(generator).decode("latin-1")):
        assert OPENAI_KEY not in blob


def test_malformed_json_is_a_clear_error_and_not_retried(openai_server):
    openai_server.enqueue(Fault(status=200, body=b'{"output": [{"type": "mess'))
    provider = OpenAIResponsesProvider(model="gpt-4.1", base_url=openai_server.base_url)
    generator = generate_text(fn=passthrough, provider=provider, retry=FAST_RETRY)
    with pytest.raises(ProviderResponseError) as caught:
        run_generate(generator, "hi")
    message = str(caught.value)
    assert "returned HTTP 200 with a body that is not a JSON object" in message
    assert "/v1/responses" in message
    assert caught.value.body == '{"output": [{"type": "mess'
    assert openai_server.served == 1
    assert generator.usage["requests_failed"] == 1


INCOMPLETE = (
    b'{"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},'
    b' "output": [{"type": "reasoning", "summary": []}]}'
)


@pytest.mark.parametrize(
    ("body", "model", "expected"),
    [
        (b"<html>Welcome to nginx</html>", "gpt-4.1", ["not at a proxy or web page"]),
        (
            b'{"choices": [{"message": {"content": "hi"}}]}',
            "gpt-4.1",
            ["the response has no ['output']", "Responses vs chat completions"],
        ),
        (INCOMPLETE, "o4-mini", ["raise max_output_tokens"]),
    ],
    ids=["html", "wrong-shape", "incomplete"],
)
def test_a_200_that_is_not_an_answer_says_what_to_change(openai_server, body, model, expected):
    openai_server.enqueue(Fault(status=200, body=body))
    provider = OpenAIResponsesProvider(model=model, base_url=openai_server.base_url)
    with pytest.raises(ProviderResponseError) as caught:
        run_generate(generate_text(fn=passthrough, provider=provider), "hi")
    for fragment in expected:
        assert fragment in str(caught.value)
    assert caught.value.body == body.decode()[: len(caught.value.body)]


def test_missing_key_names_the_variable(openai_server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    provider = OpenAIResponsesProvider(model="gpt-4.1", base_url=openai_server.base_url)
    with pytest.raises(MissingAPIKeyError, match=r"\$OPENAI_API_KEY is not set") as caught:
        run_generate(generate_text(fn=passthrough, provider=provider), "hi")
    assert caught.value.env_var == "OPENAI_API_KEY"
    assert openai_server.requests == []


def test_custom_key_variable(openai_server, monkeypatch):
    monkeypatch.setenv("TEAM_OPENAI_KEY", OPENAI_KEY)
    monkeypatch.delenv("OPENAI_API_KEY")
    provider = OpenAIResponsesProvider(
        model="gpt-4.1", base_url=openai_server.base_url, api_key_env="TEAM_OPENAI_KEY"
    )
    assert run_generate(generate_text(fn=passthrough, provider=provider), "hi").text == "echo: hi"


def test_base_url_without_scheme_is_rejected():
    provider = OpenAIResponsesProvider(model="gpt-4.1", base_url="localhost:8000/v1")
    with pytest.raises(ValueError, match="not an http\\(s\\) URL"):
        run_generate(generate_text(fn=passthrough, provider=provider), "hi")


def test_errors_pickle_with_their_details(openai_server):
    openai_server.enqueue(Fault(status=400, body=b'{"error": "bad"}'))
    provider = OpenAIResponsesProvider(model="gpt-4.1", base_url=openai_server.base_url)
    with pytest.raises(ProviderHTTPError) as caught:
        run_generate(generate_text(fn=passthrough, provider=provider), "hi")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert isinstance(copy, InferenceError)
    assert (copy.status, copy.body, str(copy)) == (400, '{"error": "bad"}', str(caught.value))
