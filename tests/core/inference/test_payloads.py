"""Each provider's request shape, auth headers and response parsing, over real HTTP."""

from __future__ import annotations

import pytest

from refiner_core.inference import (
    AnthropicProvider,
    GenerationResponse,
    OpenAIChatCompletionsProvider,
    OpenAIResponsesProvider,
    generate_text,
)

from .support import ANTHROPIC_KEY, OPENAI_KEY, run_generate


async def passthrough(row, generate):
    return row


def make(provider, **kwargs):
    return generate_text(fn=passthrough, provider=provider, **kwargs)


def test_responses_payload_auth_and_parsing(openai_server):
    generator = make(
        OpenAIResponsesProvider(model="gpt-4.1", base_url=openai_server.base_url),
        default_generation_params={"temperature": 0, "max_output_tokens": 64},
    )
    messages = [
        {"role": "system", "content": "You label robot episodes."},
        {"role": "user", "content": "The arm picks up a red cube"},
    ]
    response = run_generate(generator, messages=messages, max_output_tokens=16)

    (request,) = openai_server.requests
    assert request.method == "POST"
    assert request.path == "/v1/responses"
    assert request.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.json == {
        "model": "gpt-4.1",
        "input": messages,
        "store": False,
        "temperature": 0,
        "max_output_tokens": 16,  # the per-call value wins over the default
    }
    assert isinstance(response, GenerationResponse)
    assert response.text == "echo: The arm picks up a red cube"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (11, 8)
    assert response.raw["output"][1]["content"][0]["type"] == "output_text"
    assert response.object is None


def test_plain_string_is_one_user_message(openai_server):
    generator = make(OpenAIResponsesProvider(model="gpt-4.1", base_url=openai_server.base_url))
    response = run_generate(generator, "Describe the scene.")
    assert openai_server.requests[0].json["input"] == [
        {"role": "user", "content": "Describe the scene."}
    ]
    assert response.text == "echo: Describe the scene."


def test_openai_base_url_from_environment(openai_server, monkeypatch):
    # Like the official SDK, OPENAI_BASE_URL includes the /v1 prefix.
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url + "/")
    generator = make(OpenAIResponsesProvider(model="gpt-4.1"))
    assert run_generate(generator, "hi").text == "echo: hi"
    assert openai_server.requests[0].path == "/v1/responses"


def test_chat_completions_payload_and_usage(open_server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")  # a local server needs no key
    generator = make(
        OpenAIChatCompletionsProvider(
            model="Qwen/Qwen2.5-7B-Instruct", base_url=open_server.base_url
        ),
        default_generation_params={"max_tokens": 32},
    )
    response = run_generate(generator, [{"role": "user", "content": "count the frames"}])

    (request,) = open_server.requests
    assert request.path == "/v1/chat/completions"
    assert "authorization" not in request.headers
    assert request.json == {
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "messages": [{"role": "user", "content": "count the frames"}],
        "max_tokens": 32,
    }
    assert response.text == "echo: count the frames"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (3, 4)
    assert response.raw["object"] == "chat.completion"


def test_chat_completions_sends_key_when_set(openai_server):
    generator = make(
        OpenAIChatCompletionsProvider(model="gpt-4.1-mini", base_url=openai_server.base_url)
    )
    run_generate(generator, "hi")
    assert openai_server.requests[0].headers["authorization"] == f"Bearer {OPENAI_KEY}"


def test_chat_completions_without_key_variable_sends_no_auth(open_server):
    provider = OpenAIChatCompletionsProvider(
        model="local", base_url=open_server.base_url, api_key_env=None
    )
    run_generate(make(provider), "hi")
    assert "authorization" not in open_server.requests[0].headers


def test_anthropic_payload_headers_and_system_prompt(anthropic_server):
    generator = make(
        AnthropicProvider(model="claude-sonnet-4-5", base_url=anthropic_server.root_url),
        default_generation_params={"temperature": 0.2},
    )
    response = run_generate(
        generator,
        [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "What is in the frame?"},
        ],
        system="You label robot data.",
    )

    (request,) = anthropic_server.requests
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == ANTHROPIC_KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert request.json == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": "What is in the frame?"}],
        "system": "You label robot data.\n\nBe terse.",
        "temperature": 0.2,
    }
    assert response.text == "echo: What is in the frame?"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (5, 6)


def test_anthropic_base_url_from_environment(anthropic_server, monkeypatch):
    # Like the official SDK, ANTHROPIC_BASE_URL has no /v1.
    monkeypatch.setenv("ANTHROPIC_BASE_URL", anthropic_server.root_url)
    generator = make(
        AnthropicProvider(model="claude-haiku-4-5"), default_generation_params={"max_tokens": 5}
    )
    assert run_generate(generator, "hello there").text == "echo: hello there"
    assert anthropic_server.requests[0].json["max_tokens"] == 5


@pytest.mark.parametrize(
    ("messages", "fragment"),
    [
        ({"role": "user", "content": "x"}, "single dict"),
        ([], "non-empty list"),
        ([{"content": "no role"}], "messages[0]"),
        (42, "got int"),
    ],
)
def test_bad_messages_are_rejected_before_sending(openai_server, messages, fragment):
    generator = make(OpenAIResponsesProvider(model="gpt-4.1", base_url=openai_server.base_url))
    with pytest.raises(TypeError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        run_generate(generator, messages)
    assert openai_server.requests == []


def test_params_may_not_override_model_or_messages(openai_server):
    provider = OpenAIResponsesProvider(model="gpt-4.1", base_url=openai_server.base_url)
    with pytest.raises(ValueError, match=r"\['model'\]"):
        run_generate(make(provider), "hi", model="gpt-4o")
    with pytest.raises(ValueError, match=r"\['input'\]"):
        make(provider, default_generation_params={"input": "x"})


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_concurrent_requests": 0}, ValueError),
        ({"max_concurrent_requests": True}, ValueError),
        ({"default_generation_params": [("temperature", 0)]}, TypeError),
        ({"timeout": 0}, ValueError),
    ],
)
def test_generate_text_validates_arguments(kwargs, error):
    with pytest.raises(error, match="generate_text"):
        make(OpenAIResponsesProvider(model="gpt-4.1"), **kwargs)


def test_generate_text_rejects_non_provider_and_empty_model():
    with pytest.raises(TypeError, match="provider"):
        generate_text(fn=passthrough, provider="gpt-4.1")
    with pytest.raises(ValueError, match="non-empty model name"):
        OpenAIResponsesProvider(model="")
