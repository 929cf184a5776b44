"""``factory=``: built once per worker process, lazily, and closed when the worker ends."""

from __future__ import annotations

import asyncio
import time

import pytest

import refiner_core as mdr

from .helpers import CallLog


def items(n: int, per_shard: int) -> mdr.Pipeline:
    return mdr.from_items([{"i": i} for i in range(n)], items_per_shard=per_shard)


class SyncModel:
    """A batch callback with ``close()``; every event lands in the call log."""

    def __init__(self, log: CallLog, fail_on: int | None = None, delay: float = 0.0) -> None:
        self.log, self.fail_on, self.delay = log, fail_on, delay
        log.record("factory")

    def __call__(self, batch):
        self.log.record("call", batch[0].i)
        time.sleep(self.delay)
        if self.fail_on is not None and any(r.i == self.fail_on for r in batch):
            raise RuntimeError(f"model cannot handle row {self.fail_on}")
        return [r.update(pid_seen=True) for r in batch]

    def close(self):
        self.log.record("close")


class AsyncClient:
    """A map_async callback with ``aclose()`` (preferred over ``close()``)."""

    def __init__(self, log: CallLog, fail_on: int | None = None) -> None:
        self.log, self.fail_on = log, fail_on
        log.record("factory")

    async def __call__(self, row):
        await asyncio.sleep(0.001)
        if row.i == self.fail_on:
            raise ConnectionError("provider went away")
        return {"label": "ok"}

    async def aclose(self):
        await asyncio.sleep(0)
        self.log.record("aclose")

    def close(self):  # pragma: no cover - must not be used when aclose exists
        self.log.record("close")


def assert_once_per_worker(log: CallLog, close_kind: str, max_workers: int) -> set[int]:
    pids = [pid for pid, _ in log.events("factory")]
    assert 1 <= len(pids) <= max_workers
    assert len(set(pids)) == len(pids), "a worker process called the factory more than once"
    assert sorted(pid for pid, _ in log.events(close_kind)) == sorted(pids)
    return set(pids)


def test_factory_once_per_worker_process_and_closed(tmp_path):
    log = CallLog(tmp_path / "log")
    # 8 shards over 2 workers: a factory per shard would show up as repeated pids
    pipeline = items(40, per_shard=5).batch_map(
        factory=lambda: SyncModel(log, delay=0.01), batch_size=2
    )
    stats = pipeline.write_parquet(str(tmp_path / "out")).launch_local(num_workers=2)
    assert stats.summary.counters["rows_written"] == 40
    pids = assert_once_per_worker(log, "close", max_workers=2)
    call_pids = {pid for pid, _ in log.events("call")}
    assert call_pids == pids
    assert log.count("call") == 8 * 3  # batches of 2, 2, 1 per shard


def test_async_factory_closed_with_aclose(tmp_path):
    log = CallLog(tmp_path / "log")
    pipeline = items(30, per_shard=5).map_async(factory=lambda: AsyncClient(log), max_in_flight=4)
    pipeline.launch_local(num_workers=2)
    assert_once_per_worker(log, "aclose", max_workers=2)
    assert log.count("close") == 0


def test_each_factory_step_has_its_own_callback(tmp_path):
    log_a, log_b = CallLog(tmp_path / "a"), CallLog(tmp_path / "b")
    pipeline = (
        items(12, per_shard=3)
        .map_async(factory=lambda: AsyncClient(log_a))
        .batch_map(factory=lambda: SyncModel(log_b), batch_size=2)
    )
    pipeline.launch_local(num_workers=2)
    assert_once_per_worker(log_a, "aclose", max_workers=2)
    assert_once_per_worker(log_b, "close", max_workers=2)


def test_factory_is_lazy_and_in_process_runs_close_it(tmp_path):
    log = CallLog(tmp_path / "log")
    pipeline = items(20, per_shard=5).batch_map(factory=lambda: SyncModel(log), batch_size=3)
    iterator = pipeline.iter_rows()
    assert log.count("factory") == 0  # building and creating the iterator call nothing
    assert next(iterator).i == 0
    assert log.count("factory") == 1
    rest = list(iterator)
    assert len(rest) == 19
    assert log.count("factory") == 1 and log.count("close") == 1
    # take() stops early and still closes
    assert [r.i for r in pipeline.take(2)] == [0, 1]
    assert log.count("factory") == 2 and log.count("close") == 2
    # no rows: the factory is never called
    empty = mdr.from_items([]).batch_map(factory=lambda: SyncModel(log), batch_size=3)
    assert empty.materialize() == []
    assert log.count("factory") == 2


def test_factory_closed_on_failure_in_process(tmp_path):
    log = CallLog(tmp_path / "log")
    pipeline = items(20, per_shard=5).batch_map(
        factory=lambda: SyncModel(log, fail_on=12), batch_size=3
    )
    with pytest.raises(mdr.StepError, match="model cannot handle row 12"):
        pipeline.materialize()
    assert log.count("factory") == 1 and log.count("close") == 1


@pytest.mark.parametrize("num_workers", [1, 2])
def test_factory_closed_on_failure_under_launch_local(tmp_path, num_workers):
    log = CallLog(tmp_path / "log")
    pipeline = items(40, per_shard=5).batch_map(
        factory=lambda: SyncModel(log, fail_on=17, delay=0.02), batch_size=2
    )
    with pytest.raises(mdr.StageFailed):
        pipeline.write_parquet(str(tmp_path / "out")).launch_local(num_workers=num_workers)
    # every worker that built the callback closed it, the failing one included
    assert_once_per_worker(log, "close", max_workers=num_workers)
    assert 17 in {int(tag) for _, tag in log.events("call")}  # the failing batch ran


def test_async_factory_closed_on_failure_under_launch_local(tmp_path):
    log = CallLog(tmp_path / "log")
    pipeline = items(40, per_shard=5).map_async(factory=lambda: AsyncClient(log, fail_on=22))
    with pytest.raises(mdr.StageFailed, match="provider went away"):
        pipeline.write_parquet(str(tmp_path / "out")).launch_local(num_workers=2)
    assert_once_per_worker(log, "aclose", max_workers=2)


def test_factory_returning_a_non_callable_fails(tmp_path):
    with pytest.raises(TypeError, match="not callable"):
        items(3, per_shard=3).map_async(factory=lambda: 42).materialize()


def test_plain_function_factory_result():
    made = []

    def factory():
        made.append(1)
        offset = 100

        async def fn(row):
            return {"shifted": row.i + offset}

        return fn

    rows = items(6, per_shard=2).map_async(factory=factory).materialize()
    assert [r.shifted for r in rows] == list(range(100, 106))
    assert made == [1]


def test_failing_factory_names_step_and_shard(tmp_path):
    log = CallLog(tmp_path / "log")

    def broken_factory():
        raise OSError("model.pt not found")

    pipeline = (
        items(6, per_shard=3)
        .batch_map(factory=lambda: SyncModel(log), batch_size=2)
        .map_async(factory=broken_factory)
    )
    with pytest.raises(mdr.StepError, match=r"step 1 \(map_async\).*00000.*model.pt not found"):
        pipeline.materialize()
    with pytest.raises(mdr.StageFailed, match=r"shard 0000[01].*step 1 \(map_async\).*model.pt"):
        pipeline.launch_local(num_workers=2)
    # every worker that did build the first step's callback closed it
    assert sorted(log.events("factory")) == sorted(log.events("close"))
    assert log.count("factory") >= 2
