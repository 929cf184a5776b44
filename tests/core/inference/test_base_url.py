"""An empty base URL is refused before any request, instead of meaning "the public API"."""

from __future__ import annotations

import pytest

from refiner_core.inference import (
    AnthropicProvider,
    OpenAIChatCompletionsProvider,
    OpenAIResponsesProvider,
    generate_text,
)

from .support import FAST_RETRY, run_generate


async def passthrough(row, generate):
    return row


@pytest.mark.parametrize("base_url", ["", "   ", "\t\n"])
@pytest.mark.parametrize("provider_class", [OpenAIResponsesProvider, OpenAIChatCompletionsProvider])
def test_empty_openai_base_url_is_refused_and_sends_nothing(
    openai_server, monkeypatch, provider_class, base_url
):
    # Were the empty value taken as "unset", the request would go to $OPENAI_BASE_URL:
    # point that at the loopback server so any request would be seen there.
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    with pytest.raises(ValueError) as caught:
        provider = provider_class(model="gpt-4.1", base_url=base_url)
        generator = generate_text(fn=passthrough, provider=provider, retry=FAST_RETRY)
        run_generate(generator, "hi")
    message = str(caught.value)
    assert f"base_url={base_url!r} is empty" in message
    assert "base_url=None" in message
    assert "full URL" in message
    assert openai_server.served == 0
    assert openai_server.connections == 0


def test_empty_anthropic_base_url_is_refused_and_sends_nothing(anthropic_server, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", anthropic_server.root_url)
    with pytest.raises(ValueError, match=r"AnthropicProvider: base_url='' is empty"):
        provider = AnthropicProvider(model="claude-sonnet-4-5", base_url="")
        generator = generate_text(fn=passthrough, provider=provider, retry=FAST_RETRY)
        run_generate(generator, "hi")
    assert anthropic_server.served == 0
    assert anthropic_server.connections == 0


def test_non_string_base_url_is_refused():
    with pytest.raises(TypeError, match=r"base_url must be a URL string .* got bytes"):
        OpenAIResponsesProvider(model="gpt-4.1", base_url=b"http://localhost:8000/v1")


def test_none_and_full_urls_still_work(openai_server):
    assert OpenAIResponsesProvider(model="gpt-4.1").endpoint() == (
        "https://api.openai.com/v1/responses"
    )
    provider = OpenAIResponsesProvider(model="gpt-4.1", base_url=openai_server.base_url)
    generator = generate_text(fn=passthrough, provider=provider, retry=FAST_RETRY)
    response = run_generate(generator, "hi")
    assert response.text
    assert openai_server.served == 1
