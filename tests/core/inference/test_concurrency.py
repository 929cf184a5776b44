"""Bounded concurrency observed by the server, per-loop clients, pickling and fork."""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle

import pytest

from refiner_core.inference import OpenAIResponsesProvider, generate_text, usage_snapshot

from .support import FAST_RETRY, run_rows


async def annotate(row, generate):
    response = await generate(f"episode {row['episode']}")
    return {**row, "caption": response.text}


def make(server, max_concurrent_requests=64, fn=annotate):
    provider = OpenAIResponsesProvider(model="gpt-4.1", base_url=server.base_url)
    return generate_text(
        fn=fn, provider=provider, max_concurrent_requests=max_concurrent_requests, retry=FAST_RETRY
    )


@pytest.mark.parametrize("bound", [1, 5, 8])
def test_server_sees_at_most_max_concurrent_requests_and_reaches_it(openai_server, bound):
    openai_server.set_service_time(0.03)
    generator = make(openai_server, max_concurrent_requests=bound)
    rows = [{"episode": i} for i in range(6 * bound)]  # far more callers than the bound
    results = run_rows(generator, rows)

    assert [r["caption"] for r in results] == [f"echo: episode {i}" for i in range(6 * bound)]
    assert openai_server.max_in_flight == bound
    assert openai_server.served == 6 * bound


def test_bound_holds_for_many_generate_calls_per_row(openai_server):
    async def three_calls(row, generate):
        texts = await asyncio.gather(*(generate(f"{row['episode']}-{k}") for k in range(3)))
        return {"texts": [t.text for t in texts]}

    openai_server.set_service_time(0.02)
    generator = make(openai_server, max_concurrent_requests=4, fn=three_calls)
    results = run_rows(generator, [{"episode": i} for i in range(8)])
    assert results[7]["texts"] == ["echo: 7-0", "echo: 7-1", "echo: 7-2"]
    assert openai_server.max_in_flight == 4


def test_sync_fn_returning_an_awaitable_and_plain_sync_fn(openai_server):
    def sync_fn(row, generate):
        async def inner():
            return {"caption": (await generate("sync")).text}

        return inner()

    def no_request(row, generate):
        return {"doubled": row["episode"] * 2}

    assert run_rows(make(openai_server, fn=sync_fn), [{"episode": 1}]) == [
        {"caption": "echo: sync"}
    ]
    assert run_rows(make(openai_server, fn=no_request), [{"episode": 2}]) == [{"doubled": 4}]


def test_returning_the_response_itself_is_a_type_error(openai_server):
    async def wrong(row, generate):
        return await generate("hi")

    with pytest.raises(TypeError, match="return a row or a dict"):
        run_rows(make(openai_server, fn=wrong), [{"episode": 1}])


def test_one_client_per_event_loop(openai_server):
    generator = make(openai_server)
    # Two loops in a row (two worker runs in one process): each gets its own client.
    assert run_rows(generator, [{"episode": 1}])[0]["caption"] == "echo: episode 1"
    assert run_rows(generator, [{"episode": 2}])[0]["caption"] == "echo: episode 2"

    # Two loops at once in two threads.
    async def in_thread(i):
        try:
            return await generator({"episode": i})
        finally:
            await generator.aclose()

    async def main():
        return await asyncio.gather(
            *(asyncio.to_thread(asyncio.run, in_thread(i)) for i in range(3))
        )

    results = asyncio.run(main())
    assert [r["caption"] for r in results] == [f"echo: episode {i}" for i in range(3)]


def test_aclose_is_idempotent_and_safe_before_use(openai_server):
    generator = make(openai_server)

    async def main():
        await generator.aclose()
        await generator({"episode": 1})
        await generator.aclose()
        await generator.aclose()
        # Usable again after closing: a new client is created lazily.
        return await generator({"episode": 2})

    assert asyncio.run(main())["caption"] == "echo: episode 2"


def test_async_context_manager_closes(openai_server):
    async def main():
        async with make(openai_server) as generator:
            return await generator({"episode": 3})

    assert asyncio.run(main())["caption"] == "echo: episode 3"


def test_picklable_before_and_after_use(openai_server):
    generator = make(openai_server, max_concurrent_requests=3)
    before = pickle.loads(pickle.dumps(generator))
    assert run_rows(generator, [{"episode": 1}])[0]["caption"] == "echo: episode 1"
    after = pickle.loads(pickle.dumps(generator))

    for copy in (before, after):
        assert copy.max_concurrent_requests == 3
        assert copy.provider == generator.provider
        assert copy.retry == FAST_RETRY
        assert copy.usage["requests_ok"] == 0  # a copy counts for its own process
        assert run_rows(copy, [{"episode": 9}])[0]["caption"] == "echo: episode 9"
        assert copy.usage["requests_ok"] == 1
    assert generator.usage["requests_ok"] == 1


def _run_in_child(generator, queue):
    rows = run_rows(generator, [{"episode": i} for i in range(3)])
    queue.put((rows, generator.usage, usage_snapshot()))


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_worker_process_counts_its_own_usage(openai_server, start_method):
    """A forked worker starts from zero although the parent had counted a request; a
    spawned one gets a pickled copy. Either counts its own three requests."""
    generator = make(openai_server)
    run_rows(generator, [{"episode": 0}])  # used in the parent first

    ctx = multiprocessing.get_context(start_method)
    queue = ctx.Queue()
    child = ctx.Process(target=_run_in_child, args=(generator, queue))
    child.start()
    rows, child_usage, child_totals = queue.get(timeout=30)
    child.join(30)

    assert child.exitcode == 0
    assert [r["caption"] for r in rows] == [f"echo: episode {i}" for i in range(3)]
    assert child_usage["requests_ok"] == 3  # not 4: the parent's count stayed behind
    assert child_totals["requests_ok"] == 3
