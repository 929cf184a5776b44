"""The provider protocol: how a model API is addressed, authenticated, asked and read.

A provider is a small frozen dataclass (so it pickles to worker processes) that turns
OpenAI-style messages into its wire format and reads text and token usage back out.
It never holds an API key: the key is read from the named environment variable in the
worker, when the first request is made. Concrete providers live in ``openai.py`` and
``anthropic.py``; a new one subclasses :class:`Provider` and implements four methods.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ..errors import RefinerError
from .errors import MissingAPIKeyError
from .response import TokenUsage
from .schema import StructuredOutput


class ResponseShapeError(RefinerError, ValueError):
    """A provider response lacks something its API promises (turned into a
    ``ProviderResponseError`` carrying the body by the caller)."""


class Provider(ABC):
    """Base class of model API providers.

    Subclasses are frozen dataclasses with at least ``model`` and ``api_key_env``
    fields, and implement :meth:`endpoint`, :meth:`auth_headers`, :meth:`build_body`
    and :meth:`parse`. Providers only shape requests; nothing lands on storage.

    >>> from refiner_core.inference import OpenAIChatCompletionsProvider
    >>> provider = OpenAIChatCompletionsProvider(model="m", base_url="http://localhost:8000/v1")
    >>> provider.build_body([{"role": "user", "content": "hi"}], {"max_tokens": 8}, None)
    {'model': 'm', 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 8}
    >>> text, usage = provider.parse(
    ...     {"choices": [{"message": {"content": "hello"}}], "usage": {"prompt_tokens": 1}}, None
    ... )
    >>> text, usage.input_tokens
    ('hello', 1)
    """

    model: str
    api_key_env: str | None
    #: Whether a missing API key is an error (``False``: send no auth header).
    api_key_required: ClassVar[bool] = True
    #: Body keys the provider sets itself; generation params may not override them.
    reserved_params: ClassVar[frozenset[str]] = frozenset({"model"})

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model.strip():
            raise ValueError(
                f"{type(self).__name__}: model must be a non-empty model name such as "
                f"'gpt-4.1', got {self.model!r}"
            )
        self._check_base_url(getattr(self, "base_url", None))

    def _check_base_url(self, base_url: object) -> None:
        """Refuse a base URL that is not a URL: an empty one would otherwise fall back
        to the public endpoint and send the API key there."""
        if base_url is None:
            return
        if not isinstance(base_url, str):
            raise TypeError(
                f"{type(self).__name__}: base_url must be a URL string such as "
                f"'http://localhost:8000/v1' or None, got {type(base_url).__name__}"
            )
        if not base_url.strip():
            raise ValueError(
                f"{type(self).__name__}: base_url={base_url!r} is empty; pass base_url=None "
                "(or leave it out) for the provider's default endpoint, or a full URL such "
                "as 'http://localhost:8000/v1'. Nothing was sent."
            )

    @abstractmethod
    def endpoint(self) -> str:
        """The full URL requests are POSTed to (read from the environment if needed)."""

    @abstractmethod
    def auth_headers(self, api_key: str) -> dict[str, str]:
        """Headers that carry ``api_key``."""

    @abstractmethod
    def build_body(
        self,
        messages: list[dict[str, Any]],
        params: Mapping[str, Any],
        structured: StructuredOutput | None,
    ) -> dict[str, Any]:
        """The JSON request body for ``messages`` with generation ``params``."""

    @abstractmethod
    def parse(
        self, data: Mapping[str, Any], structured: StructuredOutput | None
    ) -> tuple[str, TokenUsage]:
        """The text and token usage from a decoded response body; raise
        :class:`ResponseShapeError` naming what is missing."""

    def extra_headers(self) -> dict[str, str]:
        """Headers sent with every request besides auth (e.g. API version)."""
        return {}

    def _base(self, env_var: str, default: str) -> str:
        """The base URL as the official SDKs pick it: ``base_url``, else ``$env_var``,
        else ``default``; without a trailing slash."""
        base = getattr(self, "base_url", None) or os.environ.get(env_var) or default
        return base.rstrip("/")

    def _env_key(self) -> str:
        return os.environ.get(self.api_key_env, "").strip() if self.api_key_env else ""

    def api_key(self) -> str | None:
        """The API key from ``$api_key_env``; raise if it is required and unset."""
        if not self.api_key_env:
            return None
        value = self._env_key()
        if not value and self.api_key_required:
            raise MissingAPIKeyError(
                f"{self!r} needs an API key but ${self.api_key_env} is not set in this "
                f"process: export {self.api_key_env}=... where the workers run, or pass "
                "api_key_env='OTHER_VARIABLE' to the provider",
                env_var=self.api_key_env,
            )
        return value or None

    def headers(self) -> dict[str, str]:
        """Every header for a request: content type, extras and auth."""
        headers = {"content-type": "application/json", **self.extra_headers()}
        key = self.api_key()
        if key is not None:
            headers.update(self.auth_headers(key))
        return headers

    def secrets(self) -> tuple[str, ...]:
        """Values to scrub from any text this provider's requests produce."""
        value = self._env_key()
        return (value,) if value else ()

    def check_params(self, params: Mapping[str, Any]) -> None:
        """Reject generation params that would overwrite what the provider sets."""
        clash = self.reserved_params.intersection(params)
        if clash:
            raise ValueError(
                f"{self!r}: generation parameter(s) {sorted(clash)} are set by the "
                "provider; pass the model to the provider and the conversation as "
                "messages=, not as parameters"
            )


def normalize_messages(messages: Any) -> list[dict[str, Any]]:
    """OpenAI-style messages as a list of dicts; a plain string is one user message.

    >>> normalize_messages("Describe the scene.")
    [{'role': 'user', 'content': 'Describe the scene.'}]
    """
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if isinstance(messages, Mapping):
        raise TypeError(
            "messages= got a single dict; pass a list of messages, e.g. "
            "[{'role': 'user', 'content': '...'}], or a plain string"
        )
    if not isinstance(messages, Sequence) or isinstance(messages, bytes) or not messages:
        raise TypeError(
            "messages= must be a non-empty list of {'role': ..., 'content': ...} dicts "
            f"or a plain string, got {type(messages).__name__}"
        )
    out = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or "role" not in message or "content" not in message:
            raise TypeError(
                f"messages[{index}] must be a dict with 'role' and 'content' keys, "
                f"got {message!r:.200}"
            )
        out.append(dict(message))
    return out


def dig(data: Any, *path: str | int) -> Any:
    """``data[path[0]][path[1]]...``, raising :class:`ResponseShapeError` that names
    the missing path."""
    current = data
    for depth, key in enumerate(path):
        try:
            current = current[key]
        except (KeyError, IndexError, TypeError):
            where = "".join(f"[{p!r}]" for p in path[: depth + 1])
            raise ResponseShapeError(f"the response has no {where}") from None
    return current


def token_count(usage: Any, key: str) -> int:
    """A token count from a usage mapping, 0 when absent or not a number."""
    if isinstance(usage, Mapping):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def content_text(content: Any) -> str:
    """Text of a message content: a string, or OpenAI-style content parts joined.

    >>> content_text([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
    'ab'
    """
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return str(content)
