"""OpenAI providers: the Responses API and OpenAI-compatible chat completions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .providers import Provider, ResponseShapeError, content_text, dig, token_count
from .response import TokenUsage
from .schema import StructuredOutput

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"


class _OpenAIProvider(Provider):
    """What both OpenAI wire formats share: the base URL rule and bearer-token auth."""

    path: ClassVar[str]

    def endpoint(self) -> str:
        # the base includes the version prefix (".../v1"), as with the official SDK
        return f"{self._base('OPENAI_BASE_URL', OPENAI_DEFAULT_BASE_URL)}/{self.path}"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"}


@dataclass(frozen=True)
class OpenAIResponsesProvider(_OpenAIProvider):
    """OpenAI's Responses API: ``POST {base_url}/responses``.

    ``base_url`` defaults to ``$OPENAI_BASE_URL`` or ``https://api.openai.com/v1``
    (include the ``/v1``, as with the official SDK). The key is read from
    ``$OPENAI_API_KEY`` (or ``api_key_env``) in each worker and sent as a bearer
    token. Messages go in ``input``; generation params (``max_output_tokens``,
    ``temperature``, ``reasoning``, ``instructions`` ...) are passed through
    verbatim. Responses are not stored on OpenAI's side unless you pass
    ``store=True``. With ``schema=``, the request uses ``text.format`` with a strict
    ``json_schema``.

    >>> provider = OpenAIResponsesProvider(model="gpt-4.1", base_url="http://localhost:8000/v1")
    >>> provider.endpoint()
    'http://localhost:8000/v1/responses'
    """

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"

    reserved_params: ClassVar[frozenset[str]] = frozenset({"model", "input"})
    path: ClassVar[str] = "responses"

    def build_body(
        self,
        messages: list[dict[str, Any]],
        params: Mapping[str, Any],
        structured: StructuredOutput | None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "input": messages, "store": False}
        body.update(params)
        if structured is not None:
            text = dict(body.get("text") or {})
            text["format"] = {
                "type": "json_schema",
                "name": structured.name,
                "schema": structured.strict_schema,
                "strict": True,
            }
            body["text"] = text
        return body

    def parse(
        self, data: Mapping[str, Any], structured: StructuredOutput | None
    ) -> tuple[str, TokenUsage]:
        output = dig(data, "output")
        if not isinstance(output, list):
            raise ResponseShapeError("the response's 'output' is not a list")
        texts: list[str] = []
        refusal = None
        for item in output:
            if not isinstance(item, Mapping) or item.get("type") != "message":
                continue  # reasoning items, tool calls ...
            for part in item.get("content") or ():
                if not isinstance(part, Mapping):
                    continue
                if part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    texts.append(part["text"])
                elif part.get("type") == "refusal":
                    refusal = part.get("refusal")
        if not texts:
            if refusal:
                raise ResponseShapeError(f"the model refused: {refusal!r}")
            status = data.get("status")
            if status == "incomplete":
                reason = (data.get("incomplete_details") or {}).get("reason", "unknown")
                raise ResponseShapeError(
                    f"the response is incomplete ({reason}) and has no output text; "
                    "raise max_output_tokens or lower the reasoning effort"
                )
            raise ResponseShapeError(
                f"the response (status {status!r}) has no 'output_text' content in 'output'"
            )
        usage = data.get("usage")
        tokens = TokenUsage(token_count(usage, "input_tokens"), token_count(usage, "output_tokens"))
        return "".join(texts), tokens


@dataclass(frozen=True)
class OpenAIChatCompletionsProvider(_OpenAIProvider):
    """An OpenAI-compatible chat completions API: ``POST {base_url}/chat/completions``.

    For vLLM, llama.cpp, Ollama, SGLang and other OpenAI-compatible servers, and for
    OpenAI itself. ``base_url`` includes the version prefix, e.g.
    ``http://localhost:8000/v1``; it defaults to ``$OPENAI_BASE_URL`` or OpenAI. The
    key in ``$OPENAI_API_KEY`` (or ``api_key_env``) is sent as a bearer token when
    set; local servers that need none work without it (``api_key_env=None`` never
    sends one). Params (``max_tokens``, ``temperature`` ...) pass through verbatim.
    With ``schema=``, the request uses ``response_format`` with a strict
    ``json_schema``.

    >>> provider = OpenAIChatCompletionsProvider(
    ...     model="Qwen/Qwen2.5-7B-Instruct", base_url="http://localhost:8000/v1"
    ... )
    >>> provider.endpoint()
    'http://localhost:8000/v1/chat/completions'
    """

    model: str
    base_url: str | None = None
    api_key_env: str | None = "OPENAI_API_KEY"

    api_key_required: ClassVar[bool] = False
    reserved_params: ClassVar[frozenset[str]] = frozenset({"model", "messages"})
    path: ClassVar[str] = "chat/completions"

    def build_body(
        self,
        messages: list[dict[str, Any]],
        params: Mapping[str, Any],
        structured: StructuredOutput | None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        body.update(params)
        if structured is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": structured.name,
                    "schema": structured.strict_schema,
                    "strict": True,
                },
            }
        return body

    def parse(
        self, data: Mapping[str, Any], structured: StructuredOutput | None
    ) -> tuple[str, TokenUsage]:
        message = dig(data, "choices", 0, "message")
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list):  # some servers return content parts
            content = content_text(content) or None
        if not isinstance(content, str):
            refusal = message.get("refusal") if isinstance(message, Mapping) else None
            if refusal:
                raise ResponseShapeError(f"the model refused: {refusal!r}")
            finish = dig(data, "choices", 0).get("finish_reason")
            raise ResponseShapeError(
                f"choices[0].message.content is empty (finish_reason {finish!r})"
            )
        usage = data.get("usage")
        tokens = TokenUsage(
            token_count(usage, "prompt_tokens"), token_count(usage, "completion_tokens")
        )
        return content, tokens
