"""Small jobs: what ``launch_local`` costs beyond the work itself."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import refiner_core as mdr

from .helpers import read_output_rows


class _ListTemp:
    """A map callback that records, in the worker, what the temporary folder holds."""

    def __init__(self, temp: Path, seen: Path) -> None:
        self.temp = temp
        self.seen = seen

    def __call__(self, row):
        self.seen.write_text("\n".join(sorted(os.listdir(self.temp))))
        return {"i": row.i}


def test_a_launch_without_a_rundir_keeps_its_progress_in_memory(tmp_path, monkeypatch):
    """Nothing can resume a launch without ``rundir=``, so it writes no run folder (no
    state, markers or fingerprint, and none of their fsyncs) while it runs."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    seen = tmp_path / "seen"
    stats = (
        mdr.from_items([{"i": i} for i in range(4)], items_per_shard=2)
        .map(_ListTemp(temp, seen))
        .write_parquet(str(tmp_path / "out"))
        .launch_local()
    )
    assert seen.read_text() == ""  # the second shard ran after the first was recorded
    assert stats.rundir is None and stats.stages[0].shards == 2
    assert stats.summary.counters["rows_written"] == 4
    assert sorted(r["i"] for r in read_output_rows(tmp_path / "out")) == [0, 1, 2, 3]


def test_a_launch_with_a_rundir_still_records_every_shard(tmp_path):
    run = tmp_path / "run"
    mdr.from_items([{"i": i} for i in range(4)], items_per_shard=2).write_parquet(
        str(tmp_path / "out")
    ).launch_local(rundir=str(run))
    assert sorted(p.name for p in (run / "stage-000").iterdir()) == ["00000.json", "00001.json"]
    assert (run / "run.json").exists()
