"""Attempt manifests and dataset summaries: typed values with a versioned JSON form."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

import refiner_core as mdr
from refiner_core.manifests import AttemptManifest, DatasetSummary
from refiner_core.manifests._attempts import MANIFEST_DIR, SUMMARY_PATH
from refiner_core.manifests.values import FORMAT_VERSION


def _written(tmp_path: Path, rows: int = 6) -> tuple[Path, mdr.PipelineSequence, mdr.LaunchStats]:
    out = tmp_path / "out"
    items = mdr.from_items([{"i": i} for i in range(rows)], items_per_shard=2)
    sequence = items.write_parquet(str(out))
    return out, sequence, sequence.launch_local(num_workers=1)


def _manifest_files(out: Path) -> list[Path]:
    return sorted((out / MANIFEST_DIR).glob("*.json"))


def test_persisted_manifests_and_summary_carry_the_format_version(tmp_path):
    out, _, stats = _written(tmp_path)
    for path in _manifest_files(out):
        data = json.loads(path.read_text())
        assert data["format_version"] == FORMAT_VERSION
        manifest = AttemptManifest.from_json(data, where=str(path))
        assert path.name == Path(manifest.path).name
        assert manifest.counters["rows_written"] == 2
    persisted = json.loads((out / SUMMARY_PATH).read_text())
    assert persisted["format_version"] == FORMAT_VERSION
    # the returned summary is typed, and its JSON form is what it persisted
    assert isinstance(stats.summary, DatasetSummary)
    assert stats.summary.rows_written == stats.summary.counters["rows_written"] == 6
    assert stats.summary.shards == 3
    assert stats.summary.to_json() == persisted
    assert DatasetSummary.from_json(persisted, where="summary.json") == stats.summary


def test_manifests_written_before_format_version_still_finalize(tmp_path):
    """Version 1 files had no ``format_version`` (and a ``version`` key): they read as is."""
    out, sequence, stats = _written(tmp_path)
    for path in _manifest_files(out):
        data = json.loads(path.read_text())
        del data["format_version"]
        data["version"] = 1
        path.write_text(json.dumps(data))
    summary = json.loads((out / SUMMARY_PATH).read_text())
    del summary["format_version"]
    (out / SUMMARY_PATH).write_text(json.dumps(summary))

    again = sequence.finalize(stats.run_id)
    assert again.rows_written == 6 and again.shards == 3
    assert again.rejected_attempts_removed == 0
    old = DatasetSummary.read(mdr.DataFolder(str(out)))
    assert old.rows_written == 6 and old.format == "parquet"


def test_an_unknown_manifest_version_fails_naming_the_version_and_the_file(tmp_path):
    out, sequence, stats = _written(tmp_path)
    path = _manifest_files(out)[0]
    data = json.loads(path.read_text())
    data["format_version"] = 99
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="format_version 99") as info:
        sequence.finalize(stats.run_id)
    assert path.name in str(info.value)
    assert "upgrade refiner_core" in str(info.value)
    # nothing was deleted on the way: every data file is still there
    assert len(list(out.glob("*.parquet"))) == 3


def test_an_unknown_summary_version_fails_naming_the_version_and_the_file(tmp_path):
    out, _, _ = _written(tmp_path)
    path = out / SUMMARY_PATH
    path.write_text(json.dumps({**json.loads(path.read_text()), "format_version": 3}))
    with pytest.raises(ValueError, match="format_version 3") as info:
        DatasetSummary.read(mdr.DataFolder(str(out)))
    assert "summary.json" in str(info.value)


def test_a_manifest_missing_a_field_names_the_file_and_the_fix(tmp_path):
    out, sequence, stats = _written(tmp_path)
    path = _manifest_files(out)[0]
    data = json.loads(path.read_text())
    del data["shard_id"]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="malformed.*shard_id") as info:
        sequence.finalize(stats.run_id)
    assert path.name in str(info.value) and "delete it" in str(info.value)


def test_write_stage_and_finalize_accessors_run_a_writer_step_by_step(tmp_path):
    out = tmp_path / "out"
    sequence = mdr.from_items([{"i": i} for i in range(5)], items_per_shard=2).write_jsonl(str(out))
    stage = sequence.write_stage
    assert stage is sequence.stages[0]
    assert sequence.finalize_stages == sequence.stages[1:]
    manifests = stage.run_task(stage.plan("0123456789ab"), run_id="0123456789ab")
    assert [m.shard_id for m in manifests] == ["00000", "00001", "00002"]
    assert all(isinstance(m, AttemptManifest) for m in manifests)
    summary = sequence.finalize("0123456789ab")
    assert summary.rows_written == 5 and summary.format == "jsonl"
    assert sorted(summary.files) == sorted(f for m in manifests for f in m.files)


def test_accessors_explain_a_sequence_without_a_write(tmp_path):
    plain = mdr.PipelineSequence.of(mdr.from_items([{"i": 1}]))
    with pytest.raises(ValueError, match="not a write.*write_parquet"):
        _ = plain.write_stage
    with pytest.raises(ValueError, match="not a write"):
        plain.finalize("0123456789ab")


def test_the_summary_is_a_plain_value_read_by_attribute(tmp_path):
    _, _, stats = _written(tmp_path)
    summary = stats.summary
    assert isinstance(summary, mdr.DatasetSummary)
    assert not isinstance(summary, Mapping)
    with pytest.raises(TypeError):
        summary["rows_written"]  # noqa: B018
    assert summary.rows_written == summary.counters["rows_written"] == 6
    assert summary.totals["shards"] == summary.shards == 3


def test_a_summary_written_by_the_first_release_still_reads(tmp_path):
    """The first summaries had no format_version and named asset_mode by the config class."""
    (tmp_path / "_refiner").mkdir()
    old = Path(__file__).with_name("old_summary.json").read_text()
    (tmp_path / SUMMARY_PATH).write_text(old)
    summary = DatasetSummary.read(mdr.DataFolder(str(tmp_path)))
    assert summary.asset_mode == "files" and summary.missing_policy == "set_null"
    assert summary.rows_written == 40 and summary.counters["missing_assets"] == 1
    assert summary.shards == 2 and summary.rejected_attempts_removed == 1
    assert summary.files == ("00000__0123456789ab.parquet", "00001__89abcdef0123.parquet")
    assert summary.open_uploads == () and summary.commit == {}
    assert DatasetSummary.from_json(summary.to_json(), where="again") == summary


def test_known_manifests_stand_in_for_listed_files_of_their_stored_size(tmp_path, monkeypatch):
    import dataclasses

    from refiner_core.io import DataFolder
    from refiner_core.manifests import reading

    out, _, _ = _written(tmp_path)
    folder = DataFolder(str(out))
    stored = reading.read_manifests(folder)
    assert len(stored) == 3
    reads: list[str] = []
    read_one = reading.read_manifest
    monkeypatch.setattr(
        reading,
        "read_manifest",
        lambda f, relative: reads.append(relative) or read_one(f, relative),
    )
    # the same manifests: nothing is read
    assert reading.read_manifests(folder, known=stored) == stored and reads == []
    # one that differs from its stored form in size is read from the store
    changed = dataclasses.replace(stored[0], counters={**stored[0].counters, "rows_written": 20})
    assert reading.read_manifests(folder, known=[changed, *stored[1:]]) == stored
    assert reads == [f"{MANIFEST_DIR}/{Path(stored[0].path).name}"]
    # one whose file is gone is left out: the listing decides what exists
    (out / stored[2].path).unlink()
    assert reading.read_persisted(folder, known=stored).manifests == tuple(stored[:2])
