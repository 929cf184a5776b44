"""Shared constants and helpers for the inference tests."""

from __future__ import annotations

import asyncio
import pickle
import traceback

from refiner_core.inference import RetryPolicy

OPENAI_KEY = "sk-test-0123456789abcdefSECRET"
ANTHROPIC_KEY = "sk-ant-test-9876543210SECRET"

FAST_RETRY = RetryPolicy(max_attempts=4, initial_backoff=0.01, max_backoff=0.05, jitter=0.0)


def run_rows(generator, rows):
    """Await the generator on every row concurrently, then close it (as the engine does)."""

    async def main():
        try:
            return await asyncio.gather(*(generator(row) for row in rows))
        finally:
            await generator.aclose()

    return asyncio.run(main())


def run_generate(generator, *args, **kwargs):
    """One ``generate`` call in a fresh event loop, closing the client afterwards."""

    async def main():
        try:
            return await generator.generate(*args, **kwargs)
        finally:
            await generator.aclose()

    return asyncio.run(main())


def everything_about(error: BaseException) -> str:
    """All the text an error exposes: message, repr, traceback with its whole chain,
    attributes and pickled form."""
    parts = [str(error), repr(error), "".join(traceback.format_exception(error))]
    cause = error
    while cause is not None:
        parts += [str(cause), repr(cause), repr(vars(cause))]
        cause = cause.__cause__ or cause.__context__
    parts.append(pickle.dumps(error).decode("latin-1"))
    return "\n".join(parts)
