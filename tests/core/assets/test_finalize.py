"""Finalization with assets: rejected and crashed attempts go, everything else stays."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import refiner_core as mdr

from .media import attempt_dirs, data_files, read_rows, relative_files, summary, write_files

dt = mdr.datatype
CONFIGS = {"file": mdr.FileAssetConfig(), "blob": mdr.BlobAssetConfig()}
CRASHED = "00000__cccccccccccc"
REJECTED = "00001__dddddddddddd"
OTHER_RUN = "00000__eeeeeeeeeeee"


def _pipeline(paths: list[str]) -> mdr.Pipeline:
    return mdr.from_items(
        [{"i": i, "video": p} for i, p in enumerate(paths)],
        items_per_shard=2,
        dtypes={"video": dt.video_path()},
    )


def _manifest(out: Path, key: str, run_id: str, *, completed_at: float, files, asset_dirs):
    shard, attempt = key.split("__")
    path = out / "_refiner" / "attempts" / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "run_id": run_id,
                "shard_id": shard,
                "attempt_id": attempt,
                "started_at": completed_at - 1,
                "completed_at": completed_at,
                "files": files,
                "asset_dirs": asset_dirs,
                "extra": {},
                "counters": {"rows_written": 99, "assets_written": 99},
                "steps": [],
            }
        )
    )


def _leftover_attempt(out: Path, key: str) -> None:
    """The data file and a block of an attempt that is not the committed one."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{key}.parquet").write_bytes(b"PAR1 not really")
    block = out / "assets" / key / "video" / "block-00000.bin"
    block.parent.mkdir(parents=True, exist_ok=True)
    block.write_bytes(b"stale bytes")


def _user_files(out: Path) -> dict[str, bytes]:
    files = {
        "assets/README.txt": b"what these folders are",
        "assets/mine/x.bin": b"my own blob",
        f"assets/mine/{CRASHED}/y.bin": b"looks like an attempt, but it is not at the top",
        "notes.txt": b"top-level user file",
    }
    for relative, data in files.items():
        (out / relative).parent.mkdir(parents=True, exist_ok=True)
        (out / relative).write_bytes(data)
    return files


@pytest.mark.parametrize("config_name", CONFIGS)
def test_finalize_removes_crashed_and_rejected_attempts_and_keeps_user_files(tmp_path, config_name):
    paths = list(write_files(tmp_path / "src", {f"{i}.y4m": b"v%d" % i for i in range(4)}).values())
    out = tmp_path / "out"
    sequence = _pipeline(paths).write_parquet(str(out), assets=CONFIGS[config_name])
    stats = sequence.launch_local(num_workers=2)
    committed = {p.name for p in attempt_dirs(out)}
    committed_files = {p.name for p in data_files(out)}
    assert len(committed) == 2 and len(committed_files) == 2
    before = sorted(read_rows(out), key=lambda r: r["i"])

    # a crashed attempt (no manifest) and a later, rejected attempt of the same run
    _leftover_attempt(out, CRASHED)
    _leftover_attempt(out, REJECTED)
    _manifest(
        out,
        REJECTED,
        stats.run_id,
        completed_at=time.time() + 60,
        files=[f"{REJECTED}.parquet"],
        asset_dirs=[f"assets/{REJECTED}"],
    )
    mine = _user_files(out)

    result = sequence.stages[-1].run(run_id=stats.run_id)

    assert {p.name for p in attempt_dirs(out)} == committed
    assert {p.name for p in data_files(out)} == committed_files
    assert not (out / "_refiner" / "attempts" / f"{REJECTED}.json").exists()
    for relative, data in mine.items():
        assert (out / relative).read_bytes() == data
    assert result.rejected_attempts_removed == 2
    assert result.counters["rows_written"] == 4 and result.counters["assets_written"] == 4
    assert summary(out)["rejected_attempts_removed"] == 2
    # the committed rows still read back
    after = sorted(read_rows(out), key=lambda r: r["i"])
    assert after == before
    read = mdr.read_blob if config_name == "blob" else (lambda p: Path(p).read_bytes())
    assert [read(r["video"]) for r in after] == [b"v0", b"v1", b"v2", b"v3"]
    # finalizing again changes nothing
    assert sequence.stages[-1].run(run_id=stats.run_id).rejected_attempts_removed == 0
    assert {p.name for p in attempt_dirs(out)} == committed


def test_a_new_run_replaces_an_earlier_run_in_the_same_output(tmp_path):
    paths = list(write_files(tmp_path / "src", {f"{i}.y4m": b"v%d" % i for i in range(2)}).values())
    out = tmp_path / "out"
    _leftover_attempt(out, OTHER_RUN)
    _manifest(
        out,
        OTHER_RUN,
        "0123456789ab",
        completed_at=time.time() - 60,
        files=[f"{OTHER_RUN}.parquet"],
        asset_dirs=[f"assets/{OTHER_RUN}"],
    )
    mine = _user_files(out)
    result = _pipeline(paths).write_parquet(str(out), assets=mdr.BlobAssetConfig()).launch_local()
    assert result.summary.rejected_attempts_removed == 1
    assert OTHER_RUN not in {p.name for p in attempt_dirs(out)}
    assert len(attempt_dirs(out)) == 1 and len(data_files(out)) == 1
    for relative, data in mine.items():
        assert (out / relative).read_bytes() == data


@pytest.mark.parametrize("config_name", CONFIGS)
def test_a_failed_attempt_leaves_nothing_visible_and_a_resume_completes(tmp_path, config_name):
    src = tmp_path / "src"
    paths = list(write_files(src, {f"{i}.y4m": b"v%d" % i for i in range(4)}).values())
    late = src / "3.y4m"
    late.unlink()  # shard 00001 (rows 2, 3) fails on its second row
    out = tmp_path / "out"
    rundir = tmp_path / "run"
    sequence = _pipeline(paths).write_parquet(str(out), assets=CONFIGS[config_name])
    with pytest.raises(mdr.StageFailed, match="row 1 of shard 00001"):
        sequence.launch_local(rundir=str(rundir))
    # shard 00000 completed; shard 00001 left no data file, no asset folder, no temp file
    everything = relative_files(out)
    assert not [f for f in everything if "00001__" in f]
    assert not [f for f in everything if f.rsplit("/", 1)[-1].startswith(".")]
    assert [p.name[:5] for p in attempt_dirs(out)] == ["00000"]

    late.write_bytes(b"v3")
    stats = sequence.launch_local(rundir=str(rundir))
    assert stats.stages[0].shards_skipped == 1
    assert stats.summary.counters["rows_written"] == 4
    assert [p.name[:5] for p in attempt_dirs(out)] == ["00000", "00001"]
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    read = mdr.read_blob if config_name == "blob" else (lambda p: Path(p).read_bytes())
    assert [read(r["video"]) for r in rows] == [b"v0", b"v1", b"v2", b"v3"]
