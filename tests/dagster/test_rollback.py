"""``refiner history`` and ``refiner rollback`` on datasets published by Dagster runs,
on local disk and moto S3; a downstream asset then loads the rolled-back-to rows."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import pytest
import s3fs
from click.testing import CliRunner

import refiner_core as mdr
import refiner_dagster as rd
from refiner_core.cli import main
from tests.s3_fixtures import s3_bucket, s3_server, s3_storage_options  # noqa: F401

from .test_io_manager import partition_root, tree


def _ids(pipeline: mdr.Pipeline) -> list[int]:
    return sorted(row["i"] for row in pipeline.iter_rows())


def publish_three(instance: dg.DagsterInstance, io_manager: Any) -> tuple[list, list[list[int]]]:
    """Publish three versions of ``episodes`` (rows [0], [10, 11], [20, 21, 22]) and add a
    downstream asset that records the rows it loads; returns (assets, rows per version)."""
    batches = [[{"i": 10 * n + k} for k in range(n + 1)] for n in range(3)]
    expected = [[r["i"] for r in b] for b in batches]
    loaded: list[list[int]] = []

    @dg.asset(name="episodes", io_manager_key="refiner")
    def episodes() -> mdr.Pipeline:
        return mdr.from_items(batches.pop(0))

    finalized = rd.build_finalization_asset(episodes)

    @dg.asset(ins={"rows": dg.AssetIn("episodes_finalized")})
    def downstream(rows: mdr.Pipeline) -> None:
        loaded.append(_ids(rows))

    resources = {"refiner": io_manager}
    for _ in range(3):
        assert dg.materialize([episodes, finalized], instance=instance, resources=resources).success
    assets = [episodes, finalized, downstream]
    return [assets, resources, loaded], expected


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_history_and_rollback_on_local_disk(dagster_instance):
    (assets, resources, loaded), expected = publish_three(
        dagster_instance, rd.RefinerBlobIOManager(num_workers=1)
    )
    root = partition_root(dagster_instance, "episodes")
    storage = rd.DatasetStorage(partition_root(dagster_instance))
    first, second, third = (v.name for v in storage.versions(["episodes"], None))
    before = {n: tree(os.path.join(root, n)) for n in (first, second, third)}

    shown = _invoke("history", root)
    assert shown.exit_code == 0, shown.output
    rows = [
        [cell.strip() for cell in line.split("\u2502")[1:-1]]
        for line in shown.output.splitlines()
        if "v-" in line and "versions of" not in line
    ]
    table = {cells[1]: cells for cells in rows}  # marker, version, state, at, run, parent, rows
    assert table[third][0] == "*" and table[third][2] == "published"
    assert table[third][5] == second and table[third][6] == "3"
    assert table[first][0] == "" and table[first][2] == "superseded" and table[first][6] == "1"
    runs = {run.run_id for run in dagster_instance.get_runs()}
    assert {table[n][4] for n in (first, second, third)} <= runs

    # default: back to the published version's parent
    done = _invoke("rollback", root, "--reason", "labels were wrong", "--by", "ana")
    assert done.exit_code == 0, done.output
    assert f"from {third} to {second}" in done.output
    assert _ids(mdr.read_parquet(root)) == expected[1]

    done = _invoke("rollback", root, "--to", first, "--reason", "go further back")
    assert done.exit_code == 0, done.output
    with open(os.path.join(root, "_current.json")) as f:
        pointer = json.load(f)
    assert pointer["version"] == first
    assert pointer["rolled_back"]["from"] == second
    assert pointer["rolled_back"]["reason"] == "go further back" and pointer["rolled_back"]["by"]
    assert [m["action"] for m in pointer["history"]] == ["publish"] * 3 + ["rollback"] * 2
    record = storage.version(["episodes"], None, first).record
    assert record["rollbacks"][-1]["reason"] == "go further back"
    assert _ids(mdr.read_parquet(root)) == expected[0]
    assert "rolled back from" in _invoke("history", root).output

    # a downstream asset now loads the first version's rows; nothing was deleted
    result = dg.materialize(
        assets, instance=dagster_instance, resources=resources, selection=["downstream"]
    )
    assert result.success and loaded == [expected[0]]
    for name, files in before.items():
        assert tree(os.path.join(root, name)) == files

    # refused moves name what is wrong and change nothing
    again = _invoke("rollback", root, "--to", first)
    assert again.exit_code == 1 and "already the published version" in again.output
    unknown = _invoke("rollback", root, "--to", "v-000000000000")
    assert unknown.exit_code == 1 and "cannot roll back to v-000000000000" in unknown.output
    assert second in unknown.output and third in unknown.output
    nothing = _invoke("history", str(os.path.dirname(root)))
    assert nothing.exit_code == 1 and "not a versioned dataset folder" in nothing.output


def test_history_and_rollback_on_s3(
    dagster_instance,
    s3_bucket: str,  # noqa: F811
    s3_storage_options: dict[str, Any],  # noqa: F811
):
    base = f"s3://{s3_bucket}/datasets"
    io_manager = rd.RefinerBlobIOManager(
        base_url=base, storage_options=s3_storage_options, num_workers=1
    )
    (_, _, _), expected = publish_three(dagster_instance, io_manager)
    url = f"{base}/episodes"
    location = ["--endpoint-url", s3_storage_options["endpoint_url"]]
    names = [
        v.name for v in rd.DatasetStorage(base, s3_storage_options).versions(["episodes"], None)
    ]

    storage = rd.DatasetStorage(base, s3_storage_options)
    published = [v.record["published_at"] for v in storage.versions(["episodes"], None)]
    for at, rows in zip(published, expected, strict=True):
        moment = datetime.fromtimestamp(at, UTC)
        assert _ids(mdr.read_parquet(url, as_of=moment, storage_options=s3_storage_options)) == rows
    shown = _invoke("history", url, *location)
    assert shown.exit_code == 0, shown.output
    assert all(n in shown.output for n in names) and "* " in shown.output
    done = _invoke("rollback", url, *location, "--to", names[0], "--reason", "bad export")
    assert done.exit_code == 0, done.output
    assert _ids(mdr.read_parquet(url, storage_options=s3_storage_options)) == expected[0]
    fs = s3fs.S3FileSystem(**s3_storage_options)
    pointer = json.loads(fs.cat(f"{s3_bucket}/datasets/episodes/_current.json"))
    assert pointer["version"] == names[0] and pointer["rolled_back"]["reason"] == "bad export"
    for name in names:  # every version still there
        assert fs.exists(f"{s3_bucket}/datasets/episodes/{name}/_refiner/summary.json")


def test_a_rollback_with_no_parent_is_refused(tmp_path):
    storage = rd.DatasetStorage(str(tmp_path))
    only = storage.begin(["ds"], None, "v-000000000001", {})
    storage.publish(only)
    refused = _invoke("rollback", str(tmp_path / "ds"))
    assert refused.exit_code == 1 and "has no parent" in refused.output
    with pytest.raises(mdr.RefinerError):
        from refiner_core.io import rollback

        rollback(mdr.DataFolder(str(tmp_path / "ds")))


def test_the_rollback_job_moves_the_pointer_and_records_a_materialization(dagster_instance):
    (assets, resources, loaded), expected = publish_three(
        dagster_instance, rd.RefinerBlobIOManager(num_workers=1)
    )
    root = partition_root(dagster_instance, "episodes")
    storage = rd.DatasetStorage(partition_root(dagster_instance))
    first, second, third = (v.name for v in storage.versions(["episodes"], None))
    before = {n: tree(os.path.join(root, n)) for n in (first, second, third)}
    defs = dg.Definitions(
        assets=assets, jobs=[rd.build_rollback_job(assets[0])], resources=resources
    )
    job = defs.get_job_def("episodes_rollback")
    config = {"ops": {"rollback": {"config": {"to": first, "reason": "bad labels", "by": "ana"}}}}
    assert job.execute_in_process(run_config=config, instance=dagster_instance).success

    assert _ids(mdr.read_parquet(root)) == expected[0]
    event = dagster_instance.get_latest_materialization_event(dg.AssetKey("episodes_finalized"))
    assert event is not None and event.asset_materialization is not None
    metadata = event.asset_materialization.metadata
    assert metadata["dagster/uri"].value == os.path.join(root, first)
    assert metadata["refiner/state"].value == f"rolled back to {first}, by ana, why: bad labels"
    assert metadata["refiner/rolled_back_from"].value == third
    assert metadata["dagster/row_count"].value == 1

    # downstream loads follow; nothing was deleted; every materialization's uri exists
    result = dg.materialize(
        assets, instance=dagster_instance, resources=resources, selection=["downstream"]
    )
    assert result.success and loaded == [expected[0]]
    for name, files in before.items():
        assert tree(os.path.join(root, name)) == files
    records = dagster_instance.fetch_materializations(dg.AssetKey("episodes_finalized"), limit=10)
    uris = [r.asset_materialization.metadata["dagster/uri"].value for r in records.records]
    assert len(uris) == 4 and all(os.path.isdir(str(u)) for u in uris)

    # default target: the parent recorded for the published version (none for the first)
    refused = job.execute_in_process(
        run_config={"ops": {"rollback": {"config": {}}}},
        instance=dagster_instance,
        raise_on_error=False,
    )
    assert not refused.success
    failure = refused.get_step_failure_events()[0].step_failure_data.error
    assert failure is not None and "has no parent" in failure.message
    assert _ids(mdr.read_parquet(root)) == expected[0]


def test_a_partitioned_rollback_needs_its_partition():
    partitions = dg.StaticPartitionsDefinition(["a", "b"])

    @dg.asset(io_manager_key="refiner", partitions_def=partitions)
    def shards() -> mdr.Pipeline:
        return mdr.from_items([{"i": 1}])

    job = rd.build_rollback_job(rd.build_finalization_asset(shards))
    result = job.execute_in_process(
        run_config={"ops": {"rollback": {"config": {"to": "v-000000000000"}}}},
        resources={"refiner": rd.RefinerBlobIOManager(base_url="memory://rollback")},
        raise_on_error=False,
    )
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.error
    assert failure is not None and "set the run config's partition" in failure.message
