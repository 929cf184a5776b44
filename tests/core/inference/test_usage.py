"""Usage counters per callable and per process."""

from __future__ import annotations

import pytest

from refiner_core.inference import (
    OpenAIChatCompletionsProvider,
    ProviderHTTPError,
    UsageCounter,
    generate_text,
    usage_snapshot,
)

from .provider_server import Fault
from .support import FAST_RETRY, run_rows

FIELDS = {"requests_ok", "requests_failed", "retries", "input_tokens", "output_tokens"}


async def describe(row, generate):
    response = await generate(row["prompt"])
    return {"text": response.text, "tokens": response.usage.total_tokens}


def test_usage_counts_requests_retries_and_tokens(open_server):
    provider = OpenAIChatCompletionsProvider(model="local", base_url=open_server.base_url)
    generator = generate_text(fn=describe, provider=provider, retry=FAST_RETRY)
    assert set(generator.usage) == FIELDS
    assert set(generator.usage.values()) == {0}
    before = usage_snapshot()

    open_server.enqueue(Fault(status=429))
    rows = [{"prompt": "one two three"}, {"prompt": "four five"}]
    results = run_rows(generator, rows)

    # The fake server counts words: input = prompt words, output = "echo:" + prompt words.
    assert results == [
        {"text": "echo: one two three", "tokens": 7},
        {"text": "echo: four five", "tokens": 5},
    ]
    expected = {
        "requests_ok": 2,
        "requests_failed": 0,
        "retries": 1,
        "input_tokens": 5,
        "output_tokens": 7,
    }
    assert generator.usage == expected
    after = usage_snapshot()
    assert {k: after[k] - before[k] for k in FIELDS} == expected


def test_failed_requests_are_counted(open_server):
    provider = OpenAIChatCompletionsProvider(model="local", base_url=open_server.base_url)
    generator = generate_text(fn=describe, provider=provider, retry=FAST_RETRY)
    open_server.enqueue(Fault(status=400))
    with pytest.raises(ProviderHTTPError):
        run_rows(generator, [{"prompt": "bad"}])
    assert generator.usage["requests_failed"] == 1
    assert generator.usage["requests_ok"] == 0


def test_usage_is_a_snapshot_not_a_live_view(open_server):
    provider = OpenAIChatCompletionsProvider(model="local", base_url=open_server.base_url)
    generator = generate_text(fn=describe, provider=provider)
    snapshot = generator.usage
    run_rows(generator, [{"prompt": "x"}])
    assert snapshot["requests_ok"] == 0
    assert generator.usage["requests_ok"] == 1


def test_usage_counter_rejects_unknown_fields():
    with pytest.raises(ValueError, match="unknown usage counter"):
        UsageCounter().add(requests=1)
