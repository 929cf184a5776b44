"""Inference helpers: call model APIs from ``map_async`` with bounded concurrency,
retries and usage counting.

    import refiner_core as mdr

    async def annotate(row, generate):
        response = await generate(f"Describe: {row['text']}")
        return {"description": response.text}

    pipeline = pipeline.map_async(
        mdr.inference.generate_text(
            fn=annotate,
            provider=mdr.inference.OpenAIResponsesProvider(model="gpt-4.1"),
            max_concurrent_requests=64,
        ),
        max_in_flight=64,
    )

API keys are read from environment variables in each worker (``OPENAI_API_KEY``,
``ANTHROPIC_API_KEY``) and never appear in errors, logs or reprs.
"""

from .anthropic import AnthropicProvider
from .errors import (
    InferenceError,
    MissingAPIKeyError,
    ProviderConnectionError,
    ProviderHTTPError,
    ProviderResponseError,
    StructuredOutputError,
)
from .generate import TextGenerator, generate_text
from .openai import OpenAIChatCompletionsProvider, OpenAIResponsesProvider
from .providers import Provider
from .response import GenerationResponse, TokenUsage
from .retry import RetryPolicy
from .usage import UsageCounter, usage_snapshot

__all__ = [
    "AnthropicProvider",
    "GenerationResponse",
    "InferenceError",
    "MissingAPIKeyError",
    "OpenAIChatCompletionsProvider",
    "OpenAIResponsesProvider",
    "Provider",
    "ProviderConnectionError",
    "ProviderHTTPError",
    "ProviderResponseError",
    "RetryPolicy",
    "StructuredOutputError",
    "TextGenerator",
    "TokenUsage",
    "UsageCounter",
    "generate_text",
    "usage_snapshot",
]
