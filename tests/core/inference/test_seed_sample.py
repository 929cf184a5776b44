"""The documented ``generate_text`` sample, run as written against the fake provider."""

from __future__ import annotations

import asyncio

import refiner_core.inference
from refiner_core.inference import OpenAIResponsesProvider, generate_text

from .support import OPENAI_KEY

EPISODES = [{"episode": i, "text": f"robot arm episode {i}"} for i in range(40)]


async def annotate(row, generate):
    response = await generate(
        messages=[
            {"role": "system", "content": "Summarise the robot episode in a few words."},
            {"role": "user", "content": row["text"]},
        ],
        max_output_tokens=32,
    )
    return {"summary": response.text, "summary_tokens": response.usage.output_tokens}


def test_seed_sample_through_the_engine(openai_server, monkeypatch):
    import refiner_core as mdr

    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    openai_server.set_service_time(0.01)
    pipeline = mdr.from_items(EPISODES, items_per_shard=20)

    pipeline = pipeline.map_async(
        mdr.inference.generate_text(
            fn=annotate,
            provider=mdr.inference.OpenAIResponsesProvider(model="gpt-4.1"),
            max_concurrent_requests=64,
        ),
        max_in_flight=64,
    )

    rows = list(pipeline.iter_rows())
    assert [row["episode"] for row in rows] == list(range(40))
    for row in rows:
        assert row["summary"] == f"echo: robot arm episode {row['episode']}"
        assert row["summary_tokens"] == 5
        assert row["text"] == f"robot arm episode {row['episode']}"  # dict merged into row
    assert openai_server.served == 40
    request = openai_server.requests[0]
    assert request.path == "/v1/responses"
    assert request.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert request.json["model"] == "gpt-4.1"
    assert request.json["max_output_tokens"] == 32
    assert 1 < openai_server.max_in_flight <= 64


def test_seed_sample_materialize(openai_server, monkeypatch):
    import refiner_core as mdr

    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    pipeline = mdr.from_items(EPISODES[:5])
    pipeline = pipeline.map_async(
        mdr.inference.generate_text(
            fn=annotate,
            provider=mdr.inference.OpenAIResponsesProvider(model="gpt-4.1"),
            max_concurrent_requests=64,
        ),
        max_in_flight=64,
    )
    rows = pipeline.materialize()
    assert [row["summary"] for row in rows] == [f"echo: robot arm episode {i}" for i in range(5)]


def test_seed_callable_directly_with_asyncio(openai_server, monkeypatch):
    """The same callback without the engine: await it per row, close it at the end."""
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    callback = refiner_core.inference.generate_text(
        fn=annotate,
        provider=OpenAIResponsesProvider(model="gpt-4.1"),
        max_concurrent_requests=64,
    )

    async def worker():
        try:
            return await asyncio.gather(*(callback(row) for row in EPISODES))
        finally:
            await callback.aclose()

    results = asyncio.run(worker())
    assert [r["summary"] for r in results] == [f"echo: {e['text']}" for e in EPISODES]
    assert callback.usage["requests_ok"] == 40
    assert callback.usage["output_tokens"] == 40 * 5


def test_mdr_inference_is_reachable():
    import refiner_core as mdr

    assert mdr.inference.generate_text is generate_text
    assert mdr.inference.OpenAIResponsesProvider is OpenAIResponsesProvider


def test_seed_sample_in_worker_processes(openai_server, monkeypatch, tmp_path):
    """launch_local ships the callback to worker processes (pickled), each opens its own
    client, and every row lands in the written table."""
    import pyarrow.parquet as pq

    import refiner_core as mdr

    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    pipeline = mdr.from_items(EPISODES, items_per_shard=10)
    pipeline = pipeline.map_async(
        mdr.inference.generate_text(
            fn=annotate,
            provider=mdr.inference.OpenAIResponsesProvider(model="gpt-4.1"),
            max_concurrent_requests=64,
        ),
        max_in_flight=64,
    )
    pipeline.write_parquet(str(tmp_path / "out")).launch_local(num_workers=2)

    table = pq.read_table(str(tmp_path / "out"))
    rows = sorted(table.to_pylist(), key=lambda row: row["episode"])
    assert [row["summary"] for row in rows] == [f"echo: {e['text']}" for e in EPISODES]
    assert openai_server.served == 40
