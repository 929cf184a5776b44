"""Single-run backfills of a fan-out dataset: one run writes a range of partitions.

Driven by the real ``dagster asset materialize --partition-range`` CLI on a real
instance: every partition of the range is planned by one plan step, written by shared
write steps, and published on its own, so one partition failing its audit blocks only
itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

import refiner_core as mdr
import refiner_dagster as rd
from refiner_dagster.checks import MISSING_ASSETS_CHECK
from refiner_dagster.storage import short_run_id
from tests.dagster import backfill_defs as defs

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def backfill_env(tmp_path, monkeypatch, dagster_home) -> dict[str, str]:
    media = tmp_path / "media"
    for day in defs.DAYS:
        (media / day).mkdir(parents=True)
        for i in range(defs.ROWS_PER_DAY):
            (media / day / f"{i}.bin").write_bytes(defs.media_bytes(day, i))
    env = {defs.MEDIA_ENV: str(media), defs.BASE_ENV: str(tmp_path / "out")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def materialize_range(first: str, last: str) -> subprocess.CompletedProcess:
    dagster = Path(sys.executable).with_name("dagster")
    command = [str(dagster), "asset", "materialize", "-m", "tests.dagster.backfill_defs"]
    command += ["--select", "days", "--partition-range", f"{first}...{last}"]
    return subprocess.run(
        command, cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=600
    )


def day_rows(day: str) -> list[tuple]:
    version = defs.refiner_resource().storage().current(["days"], day)
    assert version is not None, f"partition {day} is not published"
    rows = sorted(mdr.read_parquet(version.url).iter_rows(), key=lambda r: r.i)
    return [(r.day, r.i, mdr.read_blob(r.image)) for r in rows]


def expected(day: str) -> list[tuple]:
    return [(day, i, defs.media_bytes(day, i)) for i in range(defs.ROWS_PER_DAY)]


def latest(instance: dg.DagsterInstance, day: str) -> dg.AssetMaterialization | None:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=defs.days.key, asset_partitions=[day]), limit=5
    ).records
    events = [r.event_log_entry.asset_materialization for r in records]
    assert len(events) <= 1, f"{day} was materialized {len(events)} times"
    return events[0] if events else None


def test_one_run_backfills_three_days(backfill_env):
    done = materialize_range(defs.DAYS[0], defs.DAYS[-1])
    assert done.returncode == 0, done.stdout + done.stderr
    with dg.DagsterInstance.get() as instance:
        (run,) = instance.get_runs()
        assert run.is_success
        storage = defs.refiner_resource().storage()
        for day in defs.DAYS:
            assert day_rows(day) == expected(day)
            version = storage.current(["days"], day)
            assert version.name == f"v-{short_run_id(run.run_id)}"
            materialization = latest(instance, day)
            assert materialization is not None and materialization.partition == day
            assert materialization.metadata["dagster/uri"].value == version.url
            assert materialization.metadata["dagster/partition_row_count"].value == 3
            assert materialization.metadata["refiner/version"].value == version.name
        # one plan step and 4 shared write steps for the 9 shards of 3 days
        steps = {s.step_key for s in instance.get_run_step_stats(run.run_id)}
        writes = sorted(s for s in steps if "days_write" in s)
        assert writes == [f"days.days_write[task_{i:05d}]" for i in range(4)]
        checks = instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [dg.AssetCheckKey(defs.days.key, MISSING_ASSETS_CHECK)]
        )
        (execution,) = checks.values()
        assert execution.status.value == "SUCCEEDED"


def test_a_day_failing_its_audit_blocks_only_itself(backfill_env):
    os.remove(os.path.join(backfill_env[defs.MEDIA_ENV], "2024-01-02", "1.bin"))
    done = materialize_range(defs.DAYS[0], defs.DAYS[-1])
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "1 of 3 partition(s) blocked by their audit: 2024-01-02" in output
    storage = defs.refiner_resource().storage()
    assert storage.current(["days"], "2024-01-02") is None
    with dg.DagsterInstance.get() as instance:
        (run,) = instance.get_runs()
        assert not run.is_success
        for day in ("2024-01-01", "2024-01-03"):
            assert day_rows(day) == expected(day)
            materialization = latest(instance, day)
            assert materialization is not None
            assert (
                materialization.metadata["dagster/uri"].value == storage.current(["days"], day).url
            )
        assert latest(instance, "2024-01-02") is None
        (evaluation,) = [
            e.dagster_event.event_specific_data
            for e in instance.all_logs(run.run_id)
            if e.dagster_event is not None
            and e.dagster_event.event_type_value == "ASSET_CHECK_EVALUATION"
            and e.dagster_event.event_specific_data.check_name == MISSING_ASSETS_CHECK
        ]
        assert not evaluation.passed
        assert evaluation.metadata["failed_partitions"].value == ["2024-01-02"]


def test_the_io_manager_path_still_refuses_a_range(dagster_instance, tmp_path):
    @dg.asset(
        io_manager_key="refiner",
        partitions_def=defs.daily,
        backfill_policy=dg.BackfillPolicy.single_run(),
    )
    def days_io(context) -> mdr.Pipeline:
        return mdr.from_items([{"day": k} for k in context.partition_keys])

    result = dg.materialize(
        [days_io],
        instance=dagster_instance,
        resources={"refiner": rd.RefinerBlobIOManager(base_url=str(tmp_path / "out"))},
        tags={
            "dagster/asset_partition_range_start": defs.DAYS[0],
            "dagster/asset_partition_range_end": defs.DAYS[-1],
        },
        raise_on_error=False,
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "one run materializes 3 partitions at once" in str(failure.event_specific_data.error)
