"""Finalization commits once: reruns, crashed and rejected attempts, concurrent writers."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

import refiner_core as mdr
from refiner_core.errors import StageFailed
from refiner_core.sinks.lance import LanceCommitConflict

from .helpers import data_files, facts, journals, manifests, media, payload, run_manually, table


def rows(n: int, start: int = 0) -> list[dict]:
    return [{"id": i} for i in range(start, start + n)]


def test_finalization_is_idempotent(tmp_path: Path) -> None:
    out = str(tmp_path / "ds.lance")
    seq = mdr.from_items(rows(9), items_per_shard=3).write_lance(out)
    stats = seq.launch_local(num_workers=2)
    assert stats.summary.commit["already_committed"] is False
    finalize = seq.stages[-1]

    again = finalize.run(run_id=stats.run_id)
    assert again.commit["already_committed"] is True
    assert again.commit["version"] == 1 and again.counters["rows_written"] == 9
    # A crash after the commit but before its record: the history still shows the run.
    marker = Path(out) / "_refiner" / "lance" / "commits" / f"{stats.run_id}.json"
    marker.unlink()
    again = finalize.run(run_id=stats.run_id)
    assert again.commit["already_committed"] is True and again.commit["version"] == 1
    assert json.loads(marker.read_text())["version"] == 1
    assert facts(out)["versions"] == [1] and facts(out)["rows"] == 9


def test_append_finalization_rerun_does_not_append_twice(tmp_path: Path) -> None:
    out = str(tmp_path / "ds.lance")
    mdr.from_items(rows(3)).write_lance(out).launch_local()
    seq = mdr.from_items(rows(4, 10), items_per_shard=2).write_lance(out, mode="append")
    stats = seq.launch_local(num_workers=2)
    (Path(out) / "_refiner" / "lance" / "commits" / f"{stats.run_id}.json").unlink()
    for _ in range(2):
        summary = seq.stages[-1].run(run_id=stats.run_id)
        assert summary.commit["version"] == 2
    assert facts(out)["versions"] == [1, 2] and facts(out)["rows"] == 7


def test_rejected_attempts_are_removed(tmp_path: Path) -> None:
    out = str(tmp_path / "ds.lance")
    paths = media(tmp_path / "media", 4)
    seq = mdr.from_items(
        [{"id": i, "image": p} for i, p in enumerate(paths)],
        items_per_shard=2,
        dtypes={"image": mdr.datatype.image_path()},
    ).write_lance(out, assets=mdr.BlobAssetConfig())
    stage = seq.stages[0]
    shards = stage.plan(run_id="run000000001")
    first = stage.run_task(shards, run_id="run000000001")
    time.sleep(0.01)
    second = stage.run_task(shards[:1], run_id="run000000001")  # a duplicate attempt of shard 0
    loser = second[0]
    assert all((Path(out) / f).exists() for f in (*loser.files, *loser.asset_dirs))

    summary = seq.stages[-1].run(run_id="run000000001")
    assert summary.rejected_attempts_removed == 1 and summary.counters["rows_written"] == 4
    assert not any((Path(out) / f).exists() for f in (*loser.files, *loser.asset_dirs))
    kept = {m.attempt_id for m in first}
    assert {m["attempt_id"] for m in manifests(out)} == kept
    assert data_files(out) == facts(out)["data_files"]
    for row in mdr.read_lance(out).materialize():
        assert mdr.read_blob(row.image) == payload(row.id)


def _crash_once(marker: str, journal_dir: str):
    def crash(row):
        if row.id == 25 and not os.path.exists(marker):
            open(marker, "w").close()
            # Wait until Lance has finished (and journaled) the data files of the rows
            # handed over so far: the journaled count stays the same for half a second.
            # (A file Lance finishes in the instant before its journal entry is written
            # cannot be attributed to this attempt; that window is not what this tests.)
            deadline = time.time() + 30
            seen, stable_since = -1, time.time()
            while time.time() < deadline:
                entries = [
                    json.loads(Path(journal_dir, n).read_text())
                    for n in os.listdir(journal_dir)
                    if n.endswith(".json") and not n.startswith(".")
                ]
                count = sum(len(e["data_files"]) for e in entries if e["shard_id"] == "00000")
                if count != seen:
                    seen, stable_since = count, time.time()
                elif count > 0 and time.time() - stable_since >= 0.5:
                    break
                time.sleep(0.01)
            os._exit(3)
        return row

    return crash


def test_crashed_attempt_never_reaches_the_dataset(tmp_path: Path) -> None:
    out = str(tmp_path / "ds.lance")
    rundir = str(tmp_path / "run")
    paths = media(tmp_path / "media", 40)
    journal_dir = os.path.join(out, "_refiner", "lance", "journal")
    seq = (
        mdr.from_items(
            [{"id": i, "image": p} for i, p in enumerate(paths)],
            items_per_shard=30,
            dtypes={"image": mdr.datatype.image_path()},
        )
        .with_max_block_rows(5)
        .map(_crash_once(str(tmp_path / "crashed"), journal_dir))
        .write_lance(out, assets=mdr.BlobAssetConfig(target_bytes=200))
    )
    seq.stages[0].sink.max_rows_per_file = 5
    with pytest.raises(StageFailed, match="died with exit code 3"):
        seq.launch_local(num_workers=1, rundir=rundir)
    [crashed] = [j for j in journals(out) if j["shard_id"] == "00000"]
    assert crashed["data_files"] and all((Path(out) / f).exists() for f in crashed["data_files"])
    assert (Path(out) / crashed["asset_dir"]).exists()

    stats = seq.launch_local(num_workers=1, rundir=rundir)  # the same run, resumed
    assert stats.summary.counters["rows_written"] == 40
    committed = facts(out)
    assert committed["rows"] == 40 and committed["versions"] == [1]
    assert not set(crashed["data_files"]) & set(committed["data_files"])
    assert not any((Path(out) / f).exists() for f in crashed["data_files"])
    assert not (Path(out) / crashed["asset_dir"]).exists()
    assert data_files(out) == committed["data_files"]
    assert journals(out) == []
    assert sorted(table(out).column("id").to_pylist()) == list(range(40))


def test_failed_attempt_cleans_up_after_itself(tmp_path: Path) -> None:
    out = str(tmp_path / "ds.lance")

    def boom(row):
        if row.id == 12:
            raise RuntimeError("bad row")
        return row

    seq = (
        mdr.from_items(rows(20), items_per_shard=20)
        .with_max_block_rows(4)
        .map(boom)
        .write_lance(out)
    )
    seq.stages[0].sink.max_rows_per_file = 4
    with pytest.raises(StageFailed, match="bad row"):
        seq.launch_local()
    assert data_files(out) == [] and journals(out) == []


def _two_pending_appends(out: str, existing: int) -> tuple:
    """A dataset of ``existing`` rows and two append runs whose write stages both ran
    (both read its version 1); returns the two sequences and the second's manifests."""
    mdr.from_items(rows(existing)).write_lance(out).launch_local()
    first = mdr.from_items(rows(4, 100), items_per_shard=2).write_lance(out, mode="append")
    second = mdr.from_items(rows(3, 200)).write_lance(out, mode="append")
    run_manually(first, "runaaaaaaaaa")
    return first, second, run_manually(second, "runbbbbbbbbb")


def test_concurrent_commit_one_wins(tmp_path: Path) -> None:
    out = str(tmp_path / "ds.lance")
    first, second, losing = _two_pending_appends(out, existing=5)

    assert first.stages[-1].run(run_id="runaaaaaaaaa").commit["version"] == 2
    with pytest.raises(LanceCommitConflict) as caught:
        second.stages[-1].run(run_id="runbbbbbbbbb")
    message = str(caught.value)
    assert "it read version 1 when the run began and found version 2 at commit" in message
    assert out in message and "Launch the pipeline again" in message
    assert sorted(table(out).column("id").to_pylist()) == [0, 1, 2, 3, 4, 100, 101, 102, 103]
    assert facts(out)["versions"] == [1, 2]
    assert not any((Path(out) / f).exists() for m in losing for f in m.files)
    assert data_files(out) == facts(out)["data_files"]
    with pytest.raises(LanceCommitConflict, match="found version 2"):  # rerun: same answer
        second.stages[-1].run(run_id="runbbbbbbbbb")


def test_simultaneous_commits_one_wins(tmp_path: Path) -> None:
    out = str(tmp_path / "ds.lance")
    first, second, _ = _two_pending_appends(out, existing=5)
    outcomes: dict[str, object] = {}
    start = threading.Barrier(2)

    def finalize(seq, run_id):
        start.wait()
        try:
            outcomes[run_id] = seq.stages[-1].run(run_id=run_id).commit["version"]
        except LanceCommitConflict as exc:
            outcomes[run_id] = exc

    threads = [
        threading.Thread(target=finalize, args=(first, "runaaaaaaaaa")),
        threading.Thread(target=finalize, args=(second, "runbbbbbbbbb")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    winners = [r for r, v in outcomes.items() if v == 2]
    losers = [v for v in outcomes.values() if isinstance(v, LanceCommitConflict)]
    assert len(winners) == 1 and len(losers) == 1
    assert "read version 1" in str(losers[0])
    assert facts(out)["versions"] == [1, 2]
    expected = 5 + (4 if winners == ["runaaaaaaaaa"] else 3)
    assert facts(out)["rows"] == expected
    assert data_files(out) == facts(out)["data_files"]


def test_create_race_loser_fails(tmp_path: Path) -> None:
    out = str(tmp_path / "ds.lance")
    first = mdr.from_items(rows(2)).write_lance(out)
    second = mdr.from_items(rows(3)).write_lance(out)
    run_manually(first, "runaaaaaaaaa")
    run_manually(second, "runbbbbbbbbb")
    first.stages[-1].run(run_id="runaaaaaaaaa")
    with pytest.raises(
        LanceCommitConflict, match="found no dataset when the run began and found version 1"
    ):
        second.stages[-1].run(run_id="runbbbbbbbbb")
    assert facts(out)["rows"] == 2


def _claim(out: str, version: int, run_id: str, at: float) -> Path:
    path = Path(out) / "_refiner" / "lance" / "claims" / f"{version}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"run_id": run_id, "at": at}))
    return path


def test_a_claimed_version_stops_other_runs(tmp_path: Path) -> None:
    out = str(tmp_path / "ds.lance")
    first, second, _ = _two_pending_appends(out, existing=2)
    claim = _claim(out, 2, "runcccccccccc", time.time())  # another run is committing version 2
    with pytest.raises(LanceCommitConflict, match="run runcccccccccc is committing version 2"):
        first.stages[-1].run(run_id="runaaaaaaaaa")
    assert facts(out)["versions"] == [1]
    # A claim whose finalization died long ago is taken over.
    _claim(out, 2, "runcccccccccc", time.time() - 3600)
    assert second.stages[-1].run(run_id="runbbbbbbbbb").commit["version"] == 2
    assert not claim.exists()
    assert facts(out)["rows"] == 5


def test_commit_through_another_process(tmp_path: Path) -> None:
    """Plan, write and finalize can run in different processes (as Dagster steps do)."""
    out = str(tmp_path / "ds.lance")
    seq = mdr.from_items(rows(6), items_per_shard=3).write_lance(out)
    shards = seq.stages[0].plan(run_id="runaaaaaaaaa")
    fresh = mdr.from_items(rows(6), items_per_shard=3).write_lance(out)  # a new sink object
    fresh.stages[0].run_task(shards, run_id="runaaaaaaaaa")
    summary = mdr.from_items([]).write_lance(out).stages[-1].run(run_id="runaaaaaaaaa")
    assert summary.commit["version"] == 1 and facts(out)["rows"] == 6
