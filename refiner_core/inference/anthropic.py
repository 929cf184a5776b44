"""Anthropic's Messages API provider."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .providers import Provider, ResponseShapeError, content_text, dig, token_count
from .response import TokenUsage
from .schema import StructuredOutput

ANTHROPIC_DEFAULT_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096


@dataclass(frozen=True)
class AnthropicProvider(Provider):
    """Anthropic's Messages API: ``POST {base_url}/v1/messages``.

    ``base_url`` defaults to ``$ANTHROPIC_BASE_URL`` or ``https://api.anthropic.com``
    (without ``/v1``, as with the official SDK). The key is read from
    ``$ANTHROPIC_API_KEY`` (or ``api_key_env``) in each worker and sent as
    ``x-api-key`` with ``anthropic-version: 2023-06-01``.

    OpenAI-style messages are translated: ``system`` and ``developer`` messages become
    the top-level ``system`` prompt (after any ``system=`` param). ``max_tokens``
    defaults to 4096. Other params (``temperature``, ``top_p``, ``stop_sequences``,
    ``thinking`` ...) pass through verbatim.

    Structured output uses a forced tool call: the schema becomes the ``input_schema``
    of a single tool the model must call, and the tool input is the answer
    (``response.text`` holds it as JSON text).

    >>> provider = AnthropicProvider(model="claude-sonnet-4-5", base_url="http://localhost:9000")
    >>> provider.endpoint()
    'http://localhost:9000/v1/messages'
    """

    model: str
    base_url: str | None = None
    api_key_env: str = "ANTHROPIC_API_KEY"

    reserved_params: ClassVar[frozenset[str]] = frozenset({"model", "messages"})

    def endpoint(self) -> str:
        return f"{self._base('ANTHROPIC_BASE_URL', ANTHROPIC_DEFAULT_BASE_URL)}/v1/messages"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key}

    def extra_headers(self) -> dict[str, str]:
        return {"anthropic-version": ANTHROPIC_VERSION}

    def build_body(
        self,
        messages: list[dict[str, Any]],
        params: Mapping[str, Any],
        structured: StructuredOutput | None,
    ) -> dict[str, Any]:
        system_parts: list[str] = []
        if params.get("system"):
            system_parts.append(str(params["system"]))
        conversation = []
        for message in messages:
            if message["role"] in ("system", "developer"):
                system_parts.append(content_text(message["content"]))
            else:
                conversation.append({"role": message["role"], "content": message["content"]})
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": DEFAULT_MAX_TOKENS,
            "messages": conversation,
        }
        body.update({k: v for k, v in params.items() if k != "system"})
        if system_parts:
            body["system"] = "\n\n".join(system_parts)
        if structured is not None:
            body["tools"] = [
                {
                    "name": structured.name,
                    "description": f"Record the answer as a {structured.name} object.",
                    "input_schema": structured.json_schema,
                }
            ]
            body["tool_choice"] = {"type": "tool", "name": structured.name}
        return body

    def parse(
        self, data: Mapping[str, Any], structured: StructuredOutput | None
    ) -> tuple[str, TokenUsage]:
        content = dig(data, "content")
        if not isinstance(content, list):
            raise ResponseShapeError("the response's 'content' is not a list")
        usage = data.get("usage")
        tokens = TokenUsage(
            token_count(usage, "input_tokens")
            + token_count(usage, "cache_creation_input_tokens")
            + token_count(usage, "cache_read_input_tokens"),
            token_count(usage, "output_tokens"),
        )
        if structured is not None:
            for block in content:
                if isinstance(block, Mapping) and block.get("type") == "tool_use":
                    return json.dumps(block.get("input")), tokens
            raise ResponseShapeError(
                f"the response has no tool_use block for {structured.name} "
                f"(stop_reason {data.get('stop_reason')!r})"
            )
        texts = [
            block["text"]
            for block in content
            if isinstance(block, Mapping)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        ]
        if not texts:
            raise ResponseShapeError(
                f"the response has no text content (stop_reason {data.get('stop_reason')!r})"
            )
        return "".join(texts), tokens
