"""Finalization keeps one attempt per shard, deletes rejected attempts' files, sums counters."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq

import refiner_core as mdr

from .helpers import all_files, data_files, read_output_rows


def items(n: int, per_shard: int) -> mdr.Pipeline:
    return mdr.from_items([{"i": i, "name": f"ep{i}"} for i in range(n)], items_per_shard=per_shard)


def manifests(out: Path) -> list[dict]:
    folder = out / "_refiner" / "attempts"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def test_rejected_attempts_are_deleted_and_user_files_kept(tmp_path):
    out, rundir = tmp_path / "out", tmp_path / "run"
    sequence = items(30, per_shard=10).write_parquet(str(out))
    first = sequence.launch_local(num_workers=2, rundir=str(rundir))
    committed = {p.name for p in data_files(out)}
    assert len(committed) == 3
    run_id = first.run_id
    write_stage = sequence.stages[0]
    shards = write_stage.plan(run_id)

    # a duplicate attempt of shard 0 that completed later (e.g. a retried task)
    duplicate = write_stage.run_task([shards[0]], run_id=run_id)[0]
    # an attempt of shard 2 recorded by another run
    other_run = write_stage.run_task([shards[2]], run_id="0123456789ab")[0]
    # a crashed attempt of shard 1: its data file exists, it never wrote a manifest
    crashed = out / "00001__aaaaaaaaaaaa.parquet"
    shutil.copy(out / sorted(committed)[1], crashed)
    # a crashed attempt's temporary file
    leftover = out / ".00001__bbbbbbbbbbbb.parquet.0badc0de.tmp"
    leftover.write_bytes(b"partial")
    # the user's own files, some of them Parquet, one named almost like an attempt
    (out / "notes.txt").write_text("mine")
    (out / "mine.parquet").write_bytes(b"not refiner's")
    (out / "00001__short.parquet").write_bytes(b"not an attempt id")
    (out / "sub").mkdir()
    (out / "sub" / "00002__cccccccccccc.parquet").write_bytes(b"not in the data folder")

    assert len(manifests(out)) == 5
    stats = sequence.launch_local(num_workers=2, rundir=str(rundir))
    assert stats.stages[0].shards_skipped == 3
    summary = stats.summary

    names = set(all_files(out))
    # committed files stay, rejected ones are gone
    assert committed <= names
    for manifest in (duplicate, other_run):
        assert not set(manifest.files) & names
    assert crashed.name not in names
    assert leftover.name not in names
    # the user's files are untouched
    assert {
        "notes.txt",
        "mine.parquet",
        "00001__short.parquet",
        "sub/00002__cccccccccccc.parquet",
    } <= names
    assert (out / "notes.txt").read_text() == "mine"
    # one manifest per shard remains, all of this run
    kept = manifests(out)
    assert sorted(m["shard_id"] for m in kept) == ["00000", "00001", "00002"]
    assert {m["run_id"] for m in kept} == {run_id}
    assert {f for m in kept for f in m["files"]} == committed

    # the duplicate, the other run's attempt and the two crashed ones
    assert summary.rejected_attempts_removed == 4
    assert summary.files_removed == 4  # one data file for each of the four
    assert summary.shards == 3 and summary.counters["rows_written"] == 30
    assert list(summary.files) == sorted(committed)
    assert summary.counters["bytes_written"] == sum((out / f).stat().st_size for f in committed)
    rows = []
    for name in sorted(committed):
        rows.extend(pq.read_table(out / name).to_pylist())
    assert sorted(r["i"] for r in rows) == list(range(30))


def test_finalization_is_idempotent(tmp_path):
    out = tmp_path / "out"
    sequence = items(12, per_shard=4).write_parquet(str(out))
    stats = sequence.launch_local()

    def outside_owner_records():  # each finalization takes the folder's ownership anew
        return [f for f in all_files(out) if not f.startswith("_refiner/owners/")]

    before = outside_owner_records()
    again = sequence.stages[1].run(run_id=stats.run_id)
    assert outside_owner_records() == before
    assert again.counters["rows_written"] == 12 and again.rejected_attempts_removed == 0
    on_disk = json.loads((out / "_refiner" / "summary.json").read_text())
    assert on_disk["rows_written"] == 12


def test_filename_template_in_a_subfolder(tmp_path):
    out = tmp_path / "out"
    sequence = items(20, per_shard=5).write_parquet(
        str(out), filename_template="parts/episodes-{shard}-{attempt}.parquet"
    )
    stats = sequence.launch_local(num_workers=2)
    files = data_files(out)
    assert len(files) == 4 and all(p.parent.name == "parts" for p in files)
    assert all(p.name.startswith("episodes-0000") for p in files)
    # an orphan named by the template is removed by a later finalization
    orphan = out / "parts" / "episodes-00003-dddddddddddd.parquet"
    shutil.copy(files[0], orphan)
    (out / "parts" / "episodes-readme.parquet").write_bytes(b"user file")
    summary = sequence.stages[1].run(run_id=stats.run_id)
    assert not orphan.exists()
    assert (out / "parts" / "episodes-readme.parquet").exists()
    assert summary.rejected_attempts_removed == 1
    assert sorted(
        r.i for r in mdr.read_parquet(str(out / "parts" / "episodes-0*")).iter_rows()
    ) == list(range(20))


def test_jsonl_writer_finalizes_too(tmp_path):
    out = tmp_path / "out"
    sequence = items(9, per_shard=4).write_jsonl(str(out))
    assert [s.kind for s in sequence.stages] == ["write", "finalize"]
    stats = sequence.launch_local(num_workers=2)
    assert stats.summary.counters["rows_written"] == 9 and stats.summary.format == "jsonl"
    files = sorted(p.name for p in out.glob("*.jsonl"))
    assert files == list(stats.summary.files) and len(files) == 3
    rows = mdr.read_jsonl(str(out)).materialize()
    assert sorted((r.i, r.name) for r in rows) == [(i, f"ep{i}") for i in range(9)]


def test_output_folder_reads_back(tmp_path):
    out = tmp_path / "out"
    items(25, per_shard=10).map(lambda r: {"double": 2 * r.i}).write_parquet(
        str(out)
    ).launch_local()
    rows = read_output_rows(out)
    back = mdr.read_parquet(str(out)).materialize()
    assert sorted(r.i for r in back) == sorted(r["i"] for r in rows) == list(range(25))
    assert all(r.double == 2 * r.i for r in back)
