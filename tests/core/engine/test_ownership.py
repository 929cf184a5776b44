"""One owner per output folder: atomic records on local disk and moto S3, heartbeats,
fail-fast second writers, stale and dead owners taken over, lost leases."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time

import pytest

import refiner_core as mdr
from refiner_core.io import DataFolder
from refiner_core.io.ownership import (
    OWNERS_DIR,
    OutputFolderBusy,
    OutputOwnership,
    OwnershipLost,
    current_owner,
)
from tests.s3_fixtures import *  # noqa: F403

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(params=["local", "s3"])
def folder_url(request, tmp_path):
    """An output folder URL and its storage options, on local disk and on moto S3."""
    if request.param == "local":
        return str(tmp_path / "out"), None
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/out", request.getfixturevalue("s3_storage_options")


def _folder(folder_url) -> DataFolder:
    url, options = folder_url
    return DataFolder(url, options)


def test_one_of_many_racing_writers_takes_the_folder(folder_url):
    url, options = folder_url
    outcomes: list[object] = []
    start = threading.Barrier(8)

    def take(k: int) -> None:
        ownership = OutputOwnership(DataFolder(url, options), run_id=f"run{k}")
        start.wait()
        try:
            outcomes.append(ownership.acquire())
        except OutputFolderBusy as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=take, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    owners = [o for o in outcomes if not isinstance(o, Exception)]
    busy = [o for o in outcomes if isinstance(o, OutputFolderBusy)]
    assert len(owners) == 1 and len(busy) == 7
    winner = owners[0].run_id
    assert all(exc.owner.run_id == winner for exc in busy)
    assert current_owner(_folder(folder_url)).run_id == winner


def test_a_second_writer_fails_fast_naming_the_folder_and_the_live_run(folder_url):
    folder = _folder(folder_url)
    first = OutputOwnership(folder, run_id="runaaaa")
    first.acquire()
    started = time.monotonic()
    with pytest.raises(OutputFolderBusy) as caught:
        OutputOwnership(_folder(folder_url), run_id="runbbbb").acquire()
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert folder.url in message and "run runaaaa" in message
    assert f"pid {os.getpid()}" in message and "last heartbeat" in message
    first.release()
    second = OutputOwnership(_folder(folder_url), run_id="runbbbb")
    assert second.acquire().generation == 2
    # the record names the run, host, pid and heartbeat
    names = folder.listdir(OWNERS_DIR)
    assert names == ["0000000002.json"]
    record = json.loads(folder.read_bytes(f"{OWNERS_DIR}/{names[0]}"))
    assert record["run_id"] == "runbbbb" and record["pid"] == os.getpid()
    assert record["released_at"] is None and record["heartbeat_at"] > 0


def test_heartbeats_keep_a_live_owner_and_a_stale_one_is_taken_over(folder_url):
    lease_s = 2.0
    owner = OutputOwnership(_folder(folder_url), run_id="runaaaa", stale_after_s=lease_s)
    owner.acquire()
    owner.start_heartbeats()
    try:
        time.sleep(2 * lease_s)  # longer than the lease: only heartbeats keep it
        with pytest.raises(OutputFolderBusy):
            OutputOwnership(_folder(folder_url), run_id="runbbbb", stale_after_s=lease_s).acquire()
        record = current_owner(_folder(folder_url))
        assert record.generation == 1 and time.time() - record.heartbeat_at < lease_s
    finally:
        owner.stop_heartbeats()
    # no heartbeat for longer than the lease: stale (S3's LastModified, the clock that
    # judges it, counts whole seconds, so a second more)
    time.sleep(lease_s + 1.5)
    taker = OutputOwnership(_folder(folder_url), run_id="runbbbb", stale_after_s=lease_s)
    assert taker.acquire().generation == 2
    # the stale owner lost the folder: it may not publish nor heartbeat any more
    with pytest.raises(OwnershipLost, match="no longer owns this output folder"):
        owner.check()
    with pytest.raises(OwnershipLost):
        owner.heartbeat()
    assert current_owner(_folder(folder_url)).run_id == "runbbbb"


def test_the_owner_s_lease_decides_when_it_is_stale(folder_url):
    """A taker with a shorter timeout cannot cut a live owner's lease short."""
    owner = OutputOwnership(_folder(folder_url), run_id="runaaaa", stale_after_s=60)
    owner.acquire()
    time.sleep(0.3)
    with pytest.raises(OutputFolderBusy, match="no heartbeat for 60 s"):
        OutputOwnership(_folder(folder_url), run_id="runbbbb", stale_after_s=0.1).acquire()


def _take_and_die(url: str, options, ready) -> None:
    OutputOwnership(DataFolder(url, options), run_id="rundead").acquire()
    ready.set()
    os._exit(0)  # never releases


def test_an_owner_whose_process_exited_is_taken_over_at_once(folder_url):
    url, options = folder_url
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    p = ctx.Process(target=_take_and_die, args=(url, options, ready))
    p.start()
    p.join(timeout=60)
    assert ready.is_set() and p.exitcode == 0
    dead = current_owner(_folder(folder_url))
    assert dead.run_id == "rundead" and dead.released_at is None
    taker = OutputOwnership(_folder(folder_url), run_id="runlive")  # default 120 s lease
    assert taker.acquire().generation == dead.generation + 1


def test_launch_local_holds_the_folder_and_a_concurrent_launch_fails_fast(tmp_path):
    out = str(tmp_path / "out")

    # The second launch starts from a worker of the first, while the first holds the folder.
    def try_second(row):
        if row["i"] == 5:
            try:
                mdr.from_items([{"i": 99}]).write_parquet(out).launch_local()
            except mdr.OutputFolderBusy as exc:
                (tmp_path / "busy.txt").write_text(str(exc))
        return row

    stats = (
        mdr.from_items([{"i": i} for i in range(10)], items_per_shard=5)
        .map(try_second)
        .write_parquet(out)
        .launch_local()
    )
    message = (tmp_path / "busy.txt").read_text()
    assert f"{os.path.abspath(out)} is being written by run {stats.run_id}" in message
    assert sorted(r["i"] for r in mdr.read_parquet(out).iter_rows()) == list(range(10))
    assert stats.summary.counters["rows_written"] == 10
    record = current_owner(DataFolder(out))
    assert record.run_id == stats.run_id and record.released_at is not None


def test_a_finalization_does_not_run_while_another_launch_owns_the_folder(tmp_path):
    out = str(tmp_path / "out")
    sequence = mdr.from_items([{"i": i} for i in range(4)]).write_parquet(out)
    stats = sequence.launch_local()
    holder = OutputOwnership(DataFolder(out), run_id="runother")
    holder.acquire()
    before = sorted(os.listdir(out))
    with pytest.raises(OutputFolderBusy, match="run runother"):
        sequence.stages[1].run(run_id=stats.run_id)
    assert sorted(os.listdir(out)) == before
    holder.release()
    assert sequence.stages[1].run(run_id=stats.run_id).rows_written == 4


def test_a_heartbeat_written_after_a_takeover_is_taken_back(tmp_path):
    """A run paused between its heartbeat's check and its write (SIGSTOP, a long GC)
    writes its stale record into the new owner's folder: it removes it and fails."""
    url = (str(tmp_path / "out"), None)
    owner = OutputOwnership(_folder(url), run_id="runaaaa", stale_after_s=0.2)
    owner.acquire()
    time.sleep(0.5)
    taker = OutputOwnership(_folder(url), run_id="runbbbb", stale_after_s=0.2)
    assert taker.acquire().generation == 2
    before = sorted(p.name for p in (tmp_path / "out" / "_refiner" / "owners").iterdir())
    with pytest.raises(OwnershipLost, match="run runbbbb took it over"):
        owner._write_record()  # the write that follows a check made before the takeover
    after = sorted(p.name for p in (tmp_path / "out" / "_refiner" / "owners").iterdir())
    assert after == before
    assert current_owner(_folder(url)).run_id == "runbbbb"
