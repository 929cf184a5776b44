"""``map_async`` / ``batch_map_async``: ordering, in-flight bounds, failures, one loop."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import refiner_core as mdr

from .helpers import CallLog


def items(n: int, per_shard: int = 1000) -> mdr.Pipeline:
    return mdr.from_items([{"i": i} for i in range(n)], items_per_shard=per_shard)


class Concurrency:
    """Counts calls in progress; ``peak`` is the most seen at once."""

    def __init__(self) -> None:
        self.current = 0
        self.peak = 0

    def enter(self) -> None:
        self.current += 1
        self.peak = max(self.peak, self.current)

    def exit(self) -> None:
        self.current -= 1


def skewed(n: int):
    """Row ``i`` takes longer the earlier it is, so calls finish in reverse order."""

    async def fn(row):
        await asyncio.sleep(0.02 * (n - row.i))
        return {"finished_at": time.monotonic()}

    return fn


def test_preserve_order_true_keeps_input_order_under_skew():
    n = 8
    rows = items(n).map_async(skewed(n), max_in_flight=n, preserve_order=True).materialize()
    assert [r.i for r in rows] == list(range(n))
    # they really finished in reverse: the last row finished first
    assert rows[-1].finished_at < rows[0].finished_at


def test_preserve_order_false_emits_as_finished():
    n = 8
    rows = items(n).map_async(skewed(n), max_in_flight=n, preserve_order=False).materialize()
    assert [r.i for r in rows] == list(reversed(range(n)))


def test_batch_map_async_preserve_order():
    async def fn(batch):
        # batch [0, 1] is slowest, then [2, 3], then [4, 5]
        await asyncio.sleep(0.02 * (3 - batch[0].i // 2))
        return batch

    ordered = items(6).batch_map_async(fn, batch_size=2, max_in_flight=3).materialize()
    assert [r.i for r in ordered] == [0, 1, 2, 3, 4, 5]
    unordered = (
        items(6)
        .batch_map_async(fn, batch_size=2, max_in_flight=3, preserve_order=False)
        .materialize()
    )
    assert [r.i for r in unordered] == [4, 5, 2, 3, 0, 1]


@pytest.mark.parametrize("preserve_order", [True, False])
@pytest.mark.parametrize("limit", [1, 3, 8])
def test_map_async_in_flight_bound(limit, preserve_order):
    counter = Concurrency()

    async def fn(row):
        counter.enter()
        try:
            await asyncio.sleep(0.001 * (row.i % 4))
        finally:
            counter.exit()
        return {"ok": True}

    # small blocks so the bound must hold across block boundaries too
    pipeline = items(60).with_max_block_rows(5)
    rows = pipeline.map_async(fn, max_in_flight=limit, preserve_order=preserve_order).materialize()
    assert len(rows) == 60
    assert counter.peak == limit


@pytest.mark.parametrize("preserve_order", [True, False])
def test_batch_map_async_in_flight_bound(preserve_order):
    counter = Concurrency()
    sizes = []

    async def fn(batch):
        counter.enter()
        sizes.append(len(batch))
        try:
            await asyncio.sleep(0.002)
        finally:
            counter.exit()
        return batch

    rows = (
        items(95)
        .with_max_block_rows(7)
        .batch_map_async(fn, batch_size=10, max_in_flight=3, preserve_order=preserve_order)
        .materialize()
    )
    assert sorted(r.i for r in rows) == list(range(95))
    assert counter.peak == 3
    assert sorted(sizes) == [5] + [10] * 9


@pytest.mark.parametrize("preserve_order", [True, False])
def test_map_async_failure_names_step_and_shard_and_cancels_pending(preserve_order):
    started, cancelled = [], []

    async def fn(row):
        if row.i < 10:  # shard 00000 succeeds
            return {}
        started.append(row.i)
        if row.i == 13:
            await asyncio.sleep(0.01)
            raise RuntimeError("camera file is corrupt")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(row.i)
            raise
        return {}

    pipeline = (
        items(40, per_shard=10)
        .map(lambda r: {})
        .map_async(fn, max_in_flight=8, preserve_order=preserve_order)
    )
    t0 = time.monotonic()
    with pytest.raises(mdr.StepError) as info:
        pipeline.materialize()
    assert time.monotonic() - t0 < 5
    error = info.value
    assert error.step_index == 1 and error.step_kind == "map_async"
    assert error.shard_id == "00001"
    assert "step 1 (map_async)" in str(error) and "00001" in str(error)
    assert "camera file is corrupt" in str(error)
    assert isinstance(error.__cause__, RuntimeError)
    # every other call of that shard that was pending was cancelled, none ran on
    assert sorted(cancelled) == sorted(i for i in started if i != 13)
    assert len(started) == 8


@pytest.mark.parametrize("preserve_order", [True, False])
def test_batch_map_async_failure_cancels_pending(preserve_order):
    cancelled = []

    async def fn(batch):
        if batch[0].i == 4:
            raise ValueError("bad batch")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(batch[0].i)
            raise
        return batch

    t0 = time.monotonic()
    with pytest.raises(mdr.StepError, match=r"step 0 \(batch_map_async\).*00000.*bad batch"):
        items(20).batch_map_async(
            fn, batch_size=2, max_in_flight=3, preserve_order=preserve_order
        ).materialize()
    assert time.monotonic() - t0 < 5
    assert sorted(cancelled) == [0, 2]


@pytest.mark.parametrize(
    ("kind", "build"),
    [
        ("map", lambda p, fn: p.map(fn)),
        ("filter", lambda p, fn: p.filter(fn)),
        ("flat_map", lambda p, fn: p.flat_map(fn)),
        ("batch_map", lambda p, fn: p.batch_map(fn, batch_size=3)),
    ],
)
def test_sync_step_failure_names_step_and_shard(kind, build):
    def fn(arg):
        raise KeyError("no such camera")

    pipeline = build(items(6, per_shard=3).map(lambda r: {}), fn)
    with pytest.raises(mdr.StepError) as info:
        pipeline.materialize()
    assert info.value.step_index == 1 and info.value.step_kind == kind
    assert info.value.shard_id == "00000"
    assert f"step 1 ({kind})" in str(info.value) and "no such camera" in str(info.value)


def test_async_steps_share_one_loop_on_one_thread():
    seen = []

    async def first(row):
        seen.append(("first", id(asyncio.get_running_loop()), threading.get_ident()))
        return {}

    async def second(batch):
        seen.append(("second", id(asyncio.get_running_loop()), threading.get_ident()))
        return batch

    items(9, per_shard=3).map_async(first).batch_map_async(second, batch_size=2).materialize()
    assert {kind for kind, _, _ in seen} == {"first", "second"}
    assert len({(loop, thread) for _, loop, thread in seen}) == 1


def test_sync_callable_in_map_async():
    rows = items(3).map_async(lambda r: {"sq": r.i * r.i}).materialize()
    assert [r.sq for r in rows] == [0, 1, 4]


@pytest.mark.parametrize("launcher", ["in_process", "launch_local"])
def test_downstream_failure_cancels_pending_upstream_calls(tmp_path, launcher):
    log = CallLog(tmp_path / "log")

    async def slow_after_three(row):
        if row.i < 3:
            return {}
        log.record("started", row.i)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            log.record("cancelled", row.i)
            raise
        return {}

    def fail_on_two(row):
        if row.i == 2:
            raise RuntimeError("downstream broke")
        return {}

    pipeline = (
        items(20)
        .with_max_block_rows(1)
        .map_async(slow_after_three, max_in_flight=8)
        .map(fail_on_two)
    )
    t0 = time.monotonic()
    if launcher == "in_process":
        with pytest.raises(mdr.StepError, match=r"step 1 \(map\)"):
            pipeline.materialize()
    else:
        with pytest.raises(mdr.StageFailed, match=r"step 1 \(map\).*downstream broke"):
            pipeline.write_parquet(str(tmp_path / "out")).launch_local()
    assert time.monotonic() - t0 < 10
    started = [tag for _, tag in log.events("started")]
    assert started and sorted(started) == sorted(tag for _, tag in log.events("cancelled"))


@pytest.mark.parametrize("preserve_order", [True, False])
def test_batch_map_async_keeps_the_window_full_while_downstream_works(preserve_order):
    """While downstream handles one batch's rows, ``max_in_flight`` later batches are
    already running: results are handed on only after the window has been refilled."""
    limit, batch_size, batches = 4, 5, 12
    started: list[int] = []
    seen_when_handed_on: dict[int, int] = {}

    async def call(batch):
        started.append(batch[0].i // batch_size)
        await asyncio.sleep(0.005)
        return batch

    def downstream(row):
        seen_when_handed_on.setdefault(row.i // batch_size, len(started))
        return {}

    rows = (
        items(batch_size * batches)
        .batch_map_async(
            call, batch_size=batch_size, max_in_flight=limit, preserve_order=preserve_order
        )
        .map(downstream)
        .materialize()
    )
    assert len(rows) == batch_size * batches
    for batch, started_then in seen_when_handed_on.items():
        # this batch and every batch up to `limit` after it (where there are any) had started
        assert started_then >= min(batch + 1 + limit, batches), (batch, started_then)
