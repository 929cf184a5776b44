"""Version history: retention instead of delete-all, ``as_of=`` reads, and the
``refiner/version`` input metadata, on a real Dagster instance."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest

import refiner_core as mdr
import refiner_dagster as rd
from refiner_core.io import UnknownVersion

from .test_io_manager import current_pointer, partition_root, tree


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _ids(pipeline: mdr.Pipeline) -> list[int]:
    return sorted(row["i"] for row in pipeline.iter_rows())


def _versions_on_disk(root: str) -> list[str]:
    return sorted(n for n in os.listdir(root) if n.startswith("v-"))


def _dataset(batches: list[list[dict]], **io_fields):
    @dg.asset(name="episodes", io_manager_key="refiner")
    def episodes() -> mdr.Pipeline:
        return mdr.from_items(batches.pop(0))

    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=1, **io_fields)}
    return episodes, rd.build_finalization_asset(episodes), resources


def _publish(instance, assets, resources, times: int) -> list[dg.ExecuteInProcessResult]:
    results = []
    for _ in range(times):
        result = dg.materialize(assets, instance=instance, resources=resources)
        assert result.success
        results.append(result)
    return results


def test_three_publishes_are_kept_and_read_by_version_and_as_of(dagster_instance):
    batches = [[{"i": 10 * n + k} for k in range(n + 1)] for n in range(3)]
    expected = [[r["i"] for r in b] for b in batches]
    episodes, finalized, resources = _dataset(batches)
    _publish(dagster_instance, [episodes, finalized], resources, 3)

    root = partition_root(dagster_instance, "episodes")
    storage = rd.DatasetStorage(partition_root(dagster_instance))
    records = [v.record for v in storage.versions(["episodes"], None)]
    assert len(_versions_on_disk(root)) == 3  # the default keeps three
    names = [v.name for v in storage.versions(["episodes"], None)]
    # each record: when it was published, by which run, and the version before it
    assert [r.get("parent") for r in records] == [None, names[0], names[1]]
    runs = {run.run_id for run in dagster_instance.get_runs()}
    assert all(r["published_by"] in runs for r in records)
    published = [r["published_at"] for r in records]
    assert published == sorted(published)
    pointer = current_pointer(root)
    assert [m["version"] for m in pointer["history"]] == names

    for name, at, rows in zip(names, published, expected, strict=True):
        assert _ids(mdr.read_parquet(root, version=name)) == rows
        assert _ids(mdr.read_parquet(root, as_of=_utc(at))) == rows
    assert _ids(mdr.read_parquet(root, as_of=_utc(published[2] + 3600))) == expected[2]
    between = _utc((published[0] + published[1]) / 2)
    assert _ids(mdr.read_parquet(root, as_of=between)) == expected[0]

    before = _utc(published[0] - 60)
    with pytest.raises(UnknownVersion) as error:
        mdr.read_parquet(root, as_of=before).plan()
    assert "had no published version at" in str(error.value)
    assert root in str(error.value) and _utc(published[0]).isoformat() in str(error.value)
    with pytest.raises(ValueError, match="no timezone"):
        mdr.read_parquet(root, as_of=datetime(2024, 1, 1))
    with pytest.raises(ValueError, match="pass one of them"):
        mdr.read_parquet(root, version=names[0], as_of=_utc(published[0]))


def test_retention_deletes_only_versions_beyond_the_policy(dagster_instance):
    batches = [[{"i": n}] for n in range(5)]
    episodes, finalized, resources = _dataset(batches, keep_versions=2)
    results = _publish(dagster_instance, [episodes, finalized], resources, 2)
    root = partition_root(dagster_instance, "episodes")
    kept_files = {name: tree(os.path.join(root, name)) for name in _versions_on_disk(root)}
    assert len(kept_files) == 2
    results += _publish(dagster_instance, [episodes, finalized], resources, 3)

    storage = rd.DatasetStorage(partition_root(dagster_instance))
    names = [m["version"] for m in current_pointer(root)["history"]]
    assert len(names) == 5
    assert _versions_on_disk(root) == sorted(names[-2:])  # the two newest, oldest gone
    assert [v.name for v in storage.versions(["episodes"], None)] == names[-2:]
    assert _ids(mdr.read_parquet(root, version=names[-2])) == [3]
    # a deleted version asked for by time says so
    with pytest.raises(UnknownVersion, match="no longer on disk"):
        mdr.read_parquet(root, as_of=_utc(current_pointer(root)["history"][0]["at"])).plan()
    # every file of a version still retained is as it was; every retained
    # materialization's dagster/uri exists
    for result in results:
        for event in result.get_asset_materialization_events():
            uri = event.materialization.metadata["dagster/uri"].value
            version = os.path.basename(str(uri))
            if version in names[-2:]:
                assert os.path.isdir(str(uri)), uri
    survivors = [n for n in kept_files if n in _versions_on_disk(root)]
    for name in survivors:
        assert tree(os.path.join(root, name)) == kept_files[name]


def test_keep_for_keeps_versions_readers_saw_recently(tmp_path):
    from refiner_dagster.retention import Retention

    storage = rd.DatasetStorage(str(tmp_path))
    recent = Retention(keep_versions=1, keep_for=timedelta(hours=1)).as_record()
    names = [f"v-{n:012d}" for n in range(3)]
    for name in names:
        version = storage.begin(["ds"], None, name, {"retention": recent})
        version.folder.write_bytes(f"{name}/part.parquet", b"x")
        storage.publish(version)
    assert sorted(os.listdir(tmp_path / "ds")) == ["_current.json", "_versions", *names]

    # the same history judged an hour and more later: only the published one stays
    later = Retention(keep_versions=1, keep_for=3600)
    pointer = current_pointer(str(tmp_path / "ds"))
    published = {n: pointer["history"][i]["at"] for i, n in enumerate(names[:2])}
    assert later.expired(pointer, published, pointer["history"][-1]["at"] + 10) == []
    assert later.expired(pointer, published, pointer["history"][-1]["at"] + 3601) == names[:2]
    # by count: the newest ones stay, oldest go first
    assert Retention(keep_versions=2).expired(pointer, published, 0.0) == names[:1]


def test_a_rolled_back_to_version_counts_as_recent():
    from refiner_dagster.retention import Retention

    # v0 published, v1, v2; then the pointer moved back to v0: v1 is now the oldest.
    moves = [("v-0", 1.0), ("v-1", 2.0), ("v-2", 3.0), ("v-0", 4.0)]
    pointer = {"version": "v-0", "history": [{"version": v, "at": t} for v, t in moves]}
    published = {"v-1": 2.0, "v-2": 3.0}
    assert Retention(keep_versions=2).expired(pointer, published, 10.0) == ["v-1"]
    assert Retention(keep_versions=1, keep_for=6.5).expired(pointer, published, 10.0) == ["v-1"]


def test_retention_settings_are_checked():
    with pytest.raises(ValueError, match="keep_versions=0 must be a whole number"):
        rd.build_finalization_asset(_dataset([])[0], keep_versions=0)
    with pytest.raises(ValueError, match="refiner/keep_for=-1 must be a number of seconds"):

        @dg.asset(io_manager_key="refiner", metadata={"refiner/keep_for": -1})
        def bad() -> mdr.Pipeline:
            return mdr.from_items([{"i": 1}])

        rd.build_finalization_asset(bad)


def test_downstream_input_loads_the_version_its_metadata_names(dagster_instance):
    batches = [[{"i": 1}], [{"i": 2}, {"i": 3}]]
    episodes, finalized, resources = _dataset(batches)
    _publish(dagster_instance, [episodes, finalized], resources, 2)
    storage = rd.DatasetStorage(partition_root(dagster_instance))
    first, second = storage.versions(["episodes"], None)
    seen: dict[str, list[int]] = {}

    def reader(name: str, wanted):
        @dg.asset(
            name=name,
            ins={"rows": dg.AssetIn("episodes_finalized", metadata={"refiner/version": wanted})},
        )
        def _read(rows: mdr.Pipeline) -> None:
            seen[name] = _ids(rows)

        return _read

    moment = _utc((first.record["published_at"] + second.record["published_at"]) / 2)
    readers = [
        reader("by_name", first.name),
        reader("by_time", dg.MetadataValue.timestamp(moment)),
        reader("by_iso_time", moment.isoformat()),
        reader("latest", None),
    ]
    result = dg.materialize(
        [episodes, finalized, *readers],
        instance=dagster_instance,
        resources=resources,
        selection=[r.key for r in readers],
    )
    assert result.success
    assert seen == {"by_name": [1], "by_time": [1], "by_iso_time": [1], "latest": [2, 3]}

    too_early = reader("too_early", _utc(first.record["published_at"] - 60).isoformat())
    with pytest.raises(FileNotFoundError, match="had no published version at .* earliest"):
        dg.materialize(
            [episodes, finalized, too_early],
            instance=dagster_instance,
            resources=resources,
            selection=[too_early.key],
        )


@pytest.mark.parametrize("fmt", ["jsonl", "lance"])
def test_jsonl_and_lance_datasets_read_as_of(dagster_instance, fmt):
    batches = [[{"i": 1}], [{"i": 2}, {"i": 3}]]

    @dg.asset(name="episodes", io_manager_key="refiner", metadata={"refiner/format": fmt})
    def episodes() -> mdr.Pipeline:
        return mdr.from_items(batches.pop(0))

    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=1)}
    _publish(dagster_instance, [episodes, rd.build_finalization_asset(episodes)], resources, 2)
    root = partition_root(dagster_instance, "episodes")
    moves = current_pointer(root)["history"]
    read = mdr.read_jsonl if fmt == "jsonl" else mdr.read_lance
    assert _ids(read(root, as_of=_utc(moves[0]["at"]))) == [1]
    assert _ids(read(root, as_of=_utc(moves[1]["at"]))) == [2, 3]
    with pytest.raises(UnknownVersion, match="had no published version at"):
        read(root, as_of=_utc(moves[0]["at"] - 1)).plan()


def _one_row(context) -> mdr.Pipeline:
    return mdr.from_items([{"i": 1}])


def test_a_fan_out_dataset_keeps_versions_by_its_metadata(dagster_instance, tmp_path):
    asset = rd.build_dataset_asset(
        _one_row, name="fanned", max_tasks=1, metadata={"refiner/keep_versions": 2}
    )
    resources = {"refiner": rd.RefinerBlobIOManager(base_url=str(tmp_path), num_workers=1)}
    runs = [
        dg.materialize([asset], instance=dagster_instance, resources=resources) for _ in range(3)
    ]
    assert all(r.success for r in runs)
    names = [m["version"] for m in current_pointer(str(tmp_path / "fanned"))["history"]]
    assert _versions_on_disk(str(tmp_path / "fanned")) == sorted(names[1:])
    record = rd.DatasetStorage(str(tmp_path)).current(["fanned"], None).record
    assert record["retention"] == {"keep_versions": 2, "keep_for": None}
