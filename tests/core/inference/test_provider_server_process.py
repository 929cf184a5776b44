"""The benchmark's fake provider (its own process) answers like the thread flavour and
never sooner than its service time."""

from __future__ import annotations

import time

from refiner_core.inference import OpenAIResponsesProvider, generate_text

from .provider_server import ProviderServerProcess
from .support import OPENAI_KEY, run_rows


async def caption(row, generate):
    started = time.perf_counter()
    response = await generate(row["q"])
    return {"text": response.text, "elapsed": time.perf_counter() - started}


def test_process_server_answers_after_its_service_time():
    with ProviderServerProcess(api_key=OPENAI_KEY, service_time=0.05) as server:
        generator = generate_text(
            fn=caption,
            provider=OpenAIResponsesProvider(model="gpt-4.1", base_url=server.base_url),
        )
        rows = run_rows(generator, [{"q": f"row {i}"} for i in range(8)])
        stats = server.stop()
    assert [r["text"] for r in rows] == [f"echo: row {i}" for i in range(8)]
    assert min(r["elapsed"] for r in rows) >= 0.05
    assert stats == {"served": 8, "max_in_flight": 8}
