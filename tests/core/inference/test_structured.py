"""Structured output with a pydantic ``schema=``: request shape, success and failure."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from refiner_core.inference import (
    AnthropicProvider,
    OpenAIChatCompletionsProvider,
    OpenAIResponsesProvider,
    StructuredOutputError,
    generate_text,
)

from .support import run_generate


class EpisodeLabel(BaseModel):
    label: Literal["long", "short"] = Field(description="episode length class")
    confidence: float
    tags: list[str] = []


GOOD = '{"label": "long", "confidence": 0.9, "tags": ["pick"]}'


async def passthrough(row, generate):
    return row


def make(provider):
    return generate_text(fn=passthrough, provider=provider)


def test_responses_structured_output(openai_server):
    openai_server.set_reply(lambda request: GOOD)
    provider = OpenAIResponsesProvider(model="gpt-4.1", base_url=openai_server.base_url)
    response = run_generate(make(provider), "Label episode 7", schema=EpisodeLabel)

    assert response.object == EpisodeLabel(label="long", confidence=0.9, tags=["pick"])
    assert response.text == GOOD
    fmt = openai_server.requests[0].json["text"]["format"]
    assert fmt["type"] == "json_schema"
    assert fmt["name"] == "EpisodeLabel"
    assert fmt["strict"] is True
    schema = fmt["schema"]
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["label", "confidence", "tags"]  # strict: all listed
    assert schema["properties"]["label"]["enum"] == ["long", "short"]
    assert "default" not in schema["properties"]["tags"]


def test_responses_structured_output_keeps_other_text_options(openai_server):
    openai_server.set_reply(lambda request: GOOD)
    provider = OpenAIResponsesProvider(model="gpt-4.1", base_url=openai_server.base_url)
    run_generate(make(provider), "x", schema=EpisodeLabel, text={"verbosity": "low"})
    text = openai_server.requests[0].json["text"]
    assert text["verbosity"] == "low"
    assert text["format"]["name"] == "EpisodeLabel"


def test_chat_completions_structured_output(open_server):
    open_server.set_reply(lambda request: GOOD)
    provider = OpenAIChatCompletionsProvider(model="local", base_url=open_server.base_url)
    response = run_generate(make(provider), "Label it", schema=EpisodeLabel)
    assert response.object.label == "long"
    response_format = open_server.requests[0].json["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["name"] == "EpisodeLabel"
    assert response_format["json_schema"]["strict"] is True
    assert response_format["json_schema"]["schema"]["additionalProperties"] is False


def test_anthropic_structured_output_uses_a_forced_tool(anthropic_server):
    anthropic_server.set_reply(lambda request: GOOD)
    provider = AnthropicProvider(model="claude-sonnet-4-5", base_url=anthropic_server.root_url)
    response = run_generate(make(provider), "Label it", schema=EpisodeLabel)

    body = anthropic_server.requests[0].json
    (tool,) = body["tools"]
    assert tool["name"] == "EpisodeLabel"
    assert tool["input_schema"] == EpisodeLabel.model_json_schema()
    assert body["tool_choice"] == {"type": "tool", "name": "EpisodeLabel"}
    assert response.object == EpisodeLabel(label="long", confidence=0.9, tags=["pick"])
    assert json.loads(response.text) == json.loads(GOOD)


def test_validation_failure_carries_text_and_counts(openai_server):
    bad = '{"label": "medium", "confidence": "high"}'
    openai_server.set_reply(lambda request: bad)
    provider = OpenAIResponsesProvider(model="gpt-4.1", base_url=openai_server.base_url)
    generator = make(provider)
    with pytest.raises(StructuredOutputError) as caught:
        run_generate(generator, "Label it", schema=EpisodeLabel)

    error = caught.value
    assert error.text == bad
    assert error.schema == "EpisodeLabel"
    assert {tuple(e["loc"]) for e in error.errors} == {("label",), ("confidence",)}
    message = str(error)
    assert "does not match schema EpisodeLabel" in message
    assert "label:" in message and "confidence:" in message
    assert repr(bad) in message
    usage = generator.usage
    assert usage["requests_failed"] == 1 and usage["requests_ok"] == 0
    assert usage["output_tokens"] == 4  # billed tokens are still counted


def test_non_json_answer_is_a_structured_output_error(openai_server):
    openai_server.set_reply(lambda request: "Sure! The label is long.")
    provider = OpenAIResponsesProvider(model="gpt-4.1", base_url=openai_server.base_url)
    with pytest.raises(StructuredOutputError, match="Invalid JSON") as caught:
        run_generate(make(provider), "Label it", schema=EpisodeLabel)
    assert caught.value.text == "Sure! The label is long."


def test_schema_must_be_a_pydantic_model(openai_server):
    provider = OpenAIResponsesProvider(model="gpt-4.1", base_url=openai_server.base_url)
    with pytest.raises(TypeError, match="pydantic model class"):
        run_generate(make(provider), "x", schema={"type": "object"})
    assert openai_server.requests == []
