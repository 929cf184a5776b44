"""``generate_text``: a ``map_async`` callback that lets a row function call a model."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from ..row import Row
from .errors import InferenceError, ProviderResponseError, body_excerpt, scrub
from .providers import Provider, ResponseShapeError, normalize_messages
from .response import GenerationResponse
from .retry import RetryPolicy
from .schema import structured_output
from .transport import Transport
from .usage import UsageCounter, process_counter

DEFAULT_TIMEOUT = 600.0


class TextGenerator:
    """The callable ``generate_text`` returns: ``await generator(row)`` runs
    ``fn(row, generate)`` and returns what ``fn`` returns (a row or a dict).

    ``generate(messages, schema=None, **params)`` sends one request and returns a
    :class:`GenerationResponse`. ``messages`` is an OpenAI-style list of
    ``{"role": ..., "content": ...}`` dicts or a plain string (one user message);
    ``params`` are merged over ``default_generation_params`` and passed to the
    provider verbatim; ``schema`` is a pydantic model class whose validated instance
    lands on ``response.object``.

    Nothing is written to storage: results land in the rows ``fn`` returns.
    The HTTP client is created per worker event loop on first use; ``aclose()``
    closes it (the engine calls it when the worker finishes). ``usage`` is a dict of
    this callable's counters in this process.

    >>> import asyncio
    >>> import refiner_core.inference as inference
    >>> async def annotate(row, generate):
    ...     response = await generate(f"Caption: {row['text']}", max_output_tokens=50)
    ...     return {"caption": response.text}
    >>> generator = inference.generate_text(
    ...     fn=annotate,
    ...     provider=inference.OpenAIResponsesProvider(model="gpt-4.1"),
    ...     max_concurrent_requests=64,
    ... )
    >>> generator.usage["requests_ok"]
    0
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        provider: Provider,
        *,
        max_concurrent_requests: int = 64,
        default_generation_params: Mapping[str, Any] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(
                f"generate_text(fn=...) must be a function taking (row, generate), got {fn!r}"
            )
        if not isinstance(provider, Provider):
            raise TypeError(
                "generate_text(provider=...) must be a provider such as "
                "mdr.inference.OpenAIResponsesProvider(model='gpt-4.1'), "
                f"got {type(provider).__name__}"
            )
        if (
            not isinstance(max_concurrent_requests, int)
            or isinstance(max_concurrent_requests, bool)
            or max_concurrent_requests < 1
        ):
            raise ValueError(
                "generate_text(max_concurrent_requests=...) must be a positive integer, "
                f"got {max_concurrent_requests!r}"
            )
        if default_generation_params is not None and not isinstance(
            default_generation_params, Mapping
        ):
            raise TypeError(
                "generate_text(default_generation_params=...) must be a dict such as "
                f"{{'temperature': 0}}, got {type(default_generation_params).__name__}"
            )
        if not isinstance(timeout, int | float) or timeout <= 0:
            raise ValueError(f"generate_text(timeout=...) must be seconds > 0, got {timeout!r}")
        defaults = dict(default_generation_params or {})
        provider.check_params(defaults)
        self.fn = fn
        self.provider = provider
        self.max_concurrent_requests = max_concurrent_requests
        self.default_generation_params = defaults
        self._usage = UsageCounter(parent=process_counter())
        self._transport = Transport(
            provider,
            max_concurrent_requests=max_concurrent_requests,
            timeout=float(timeout),
            retry=retry or RetryPolicy(),
            usage=self._usage,
        )

    @property
    def usage(self) -> dict[str, int]:
        """This callable's counters in this process: ``requests_ok``,
        ``requests_failed``, ``retries``, ``input_tokens``, ``output_tokens``."""
        return self._usage.snapshot()

    @property
    def retry(self) -> RetryPolicy:
        return self._transport.retry

    @property
    def timeout(self) -> float:
        return self._transport.timeout

    async def __call__(self, row: Row) -> Any:
        result = self.fn(row, self.generate)
        while inspect.isawaitable(result):
            result = await result
        if isinstance(result, GenerationResponse):
            raise TypeError(
                f"generate_text fn {getattr(self.fn, '__name__', self.fn)!r} returned the "
                "GenerationResponse itself; return a row or a dict built from it, e.g. "
                "{'caption': response.text}"
            )
        return result

    async def generate(
        self, messages: Any, schema: Any = None, **params: Any
    ) -> GenerationResponse:
        """Send one request; see the class docstring."""
        structured = structured_output(schema) if schema is not None else None
        if params:
            self.provider.check_params(params)
            merged = {**self.default_generation_params, **params}
        else:
            merged = self.default_generation_params
        body = self.provider.build_body(normalize_messages(messages), merged, structured)
        try:
            data = await self._transport.post(body)
        except InferenceError:
            self._usage.add(requests_failed=1)
            raise
        try:
            text, tokens = self.provider.parse(data, structured)
        except ResponseShapeError as exc:
            self._usage.add(requests_failed=1)
            raise self._shape_error(exc, data) from None
        obj = None
        if structured is not None:
            try:
                obj = structured.validate(text)
            except InferenceError as error:
                # The tokens were billed even though the answer is unusable.
                self._usage.add(
                    requests_failed=1,
                    input_tokens=tokens.input_tokens,
                    output_tokens=tokens.output_tokens,
                )
                secrets = self.provider.secrets()
                error.args = (scrub(error.message, secrets),)
                error.text = scrub(error.text, secrets)  # type: ignore[attr-defined]
                raise
        self._usage.add(
            requests_ok=1, input_tokens=tokens.input_tokens, output_tokens=tokens.output_tokens
        )
        return GenerationResponse(text=text, usage=tokens, raw=data, object=obj)

    def _shape_error(self, exc: ResponseShapeError, data: Any) -> ProviderResponseError:
        secrets = self.provider.secrets()
        body = body_excerpt(json.dumps(data, default=str), secrets)
        message = (
            f"{self.provider!r}: unexpected response from {self.provider.endpoint()}: {exc}. "
            f"Body: {body!r}. Fix: check that the provider class matches the server's API "
            "(Responses vs chat completions vs Anthropic Messages)"
        )
        return ProviderResponseError(scrub(message, secrets), body=body)

    async def aclose(self) -> None:
        """Close this worker event loop's HTTP client. Safe to call more than once."""
        await self._transport.aclose()

    async def __aenter__(self) -> TextGenerator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        name = getattr(self.fn, "__qualname__", repr(self.fn))
        return (
            f"TextGenerator(fn={name}, provider={self.provider!r}, "
            f"max_concurrent_requests={self.max_concurrent_requests})"
        )


def generate_text(
    fn: Callable[..., Any],
    provider: Provider,
    max_concurrent_requests: int = 64,
    default_generation_params: Mapping[str, Any] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    retry: RetryPolicy | None = None,
) -> TextGenerator:
    """Wrap ``fn(row, generate)`` into a ``map_async`` callback that calls ``provider``.

    ``fn`` (sync or async) receives the row and ``generate``; it awaits
    ``generate(messages=..., schema=None, **params)`` as often as it likes and returns
    a row or a dict. ``max_concurrent_requests`` bounds HTTP requests in flight per
    worker; ``default_generation_params`` are sent with every request (per-call params
    win). ``timeout`` is seconds per attempt; ``retry`` is a :class:`RetryPolicy`
    (408/409/429/5xx and connection errors, honouring ``Retry-After``).

    >>> import refiner_core as mdr
    >>> import refiner_core.inference
    >>> async def annotate(row, generate):
    ...     response = await generate([{"role": "user", "content": row["text"]}])
    ...     return {"summary": response.text}
    >>> callback = mdr.inference.generate_text(
    ...     fn=annotate,
    ...     provider=mdr.inference.OpenAIResponsesProvider(model="gpt-4.1"),
    ...     max_concurrent_requests=64,
    ... )
    >>> # pipeline = pipeline.map_async(callback, max_in_flight=64)
    """
    return TextGenerator(
        fn,
        provider,
        max_concurrent_requests=max_concurrent_requests,
        default_generation_params=default_generation_params,
        timeout=timeout,
        retry=retry,
    )
