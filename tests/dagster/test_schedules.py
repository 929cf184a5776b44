"""The refresh schedule: one run request per tick, keyed by the scheduled time."""

import datetime

import dagster as dg
import pytest

from refiner_dagster.schedules import REFRESH_TIME_TAG, build_refresh_schedule


@dg.asset
def dataset() -> int:
    return 1


@dg.asset
def dataset_final(dataset: int) -> int:
    return dataset + 1


JOB = dg.define_asset_job("dataset_job", selection=[dataset, dataset_final])


def test_tick_produces_run_request() -> None:
    schedule = build_refresh_schedule(JOB, "0 3 * * *", "Europe/Paris", tags={"team": "data"})
    assert schedule.name == "dataset_job_refresh"
    assert schedule.cron_schedule == "0 3 * * *"
    assert schedule.execution_timezone == "Europe/Paris"
    assert schedule.job_name == "dataset_job"

    when = datetime.datetime(2024, 5, 1, 3, 0, tzinfo=datetime.UTC)
    with dg.instance_for_test() as instance:
        context = dg.build_schedule_context(instance=instance, scheduled_execution_time=when)
        request = schedule(context)
    assert isinstance(request, dg.RunRequest)
    assert request.run_key == "dataset_job@2024-05-01T03:00:00+00:00"
    assert request.tags[REFRESH_TIME_TAG] == "2024-05-01T03:00:00+00:00"
    assert request.tags["team"] == "data"

    # Another tick is another run; the same tick is the same run key.
    later = dg.build_schedule_context(scheduled_execution_time=when + datetime.timedelta(days=1))
    assert schedule(later).run_key != request.run_key
    assert schedule(dg.build_schedule_context(scheduled_execution_time=when)).run_key == (
        request.run_key
    )


def test_schedule_targets_the_job_and_runs_it() -> None:
    schedule = build_refresh_schedule(JOB, "*/15 * * * *", "UTC", name="refresh_every_15m")
    defs = dg.Definitions(assets=[dataset, dataset_final], jobs=[JOB], schedules=[schedule])
    resolved = defs.resolve_schedule_def("refresh_every_15m")
    assert resolved.job_name == "dataset_job"
    assert resolved.default_status == dg.DefaultScheduleStatus.STOPPED

    # The request launches as-is on the job the schedule targets.
    request = schedule(dg.build_schedule_context())
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("dataset_job").execute_in_process(
            instance=instance, tags=request.tags, run_config=request.run_config or {}
        )
        assert result.success
        assert result.output_for_node("dataset_final") == 2
        run = instance.get_run_by_id(result.run_id)
        assert run.tags[REFRESH_TIME_TAG] == "manual"


def test_invalid_arguments() -> None:
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="cron"):
        build_refresh_schedule(JOB, "every day", "UTC")
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="timezone"):
        build_refresh_schedule(JOB, "0 3 * * *", "Mars/Olympus")
    with pytest.raises(TypeError, match="needs a job"):
        build_refresh_schedule("dataset_job", "0 3 * * *", "UTC")
