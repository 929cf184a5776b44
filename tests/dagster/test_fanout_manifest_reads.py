"""Fan-out steps read each attempt manifest at most once: a write step only its own
shards', finalization only those its write steps did not return as stored, counted at
the moto S3 server through a proxy."""

from __future__ import annotations

import dataclasses

import dagster as dg

from tests.dagster import fanout_defs as defs
from tests.dagster.fanout_defs import expected_rows, published, rows_of
from tests.dagster.test_fanout import fanout_env  # noqa: F401
from tests.s3_fixtures import *  # noqa: F403

MANIFESTS = "_refiner/attempts"


def _manifest_requests(proxy) -> tuple[list[str], list[str]]:
    """The GetObject paths of manifests and the prefixes of manifest listings."""
    gets = [r.path for r in proxy.records("GetObject") if f"/{MANIFESTS}/" in r.path]
    lists = [
        r.query.get("prefix", "")
        for r in proxy.records("ListObjects")
        if MANIFESTS in r.query.get("prefix", "")
    ]
    return gets, lists


def test_write_steps_read_only_their_shards_and_finalization_reads_none_they_returned(
    dagster_instance,
    fanout_env,  # noqa: F811
    s3_bucket,
    s3_proxy,
    monkeypatch,
):
    monkeypatch.setenv(defs.BASE_ENV, f"s3://{s3_bucket}/data")
    monkeypatch.setenv(defs.S3_ENDPOINT_ENV, s3_proxy.endpoint_url)
    result = dg.materialize(
        [defs.frames], instance=dagster_instance, resources={"refiner": defs.refiner_resource()}
    )
    assert result.success
    version = published("frames")
    assert rows_of(version) == expected_rows()
    shards = version.summary().shards
    assert shards == 6  # in 3 write steps

    gets, lists = _manifest_requests(s3_proxy)
    # the write steps found nothing of their own committed and read no other task's
    # manifest; the finalize step counted and reduced the manifests the write steps
    # returned, each listed with the size of its stored form, without reading any
    assert gets == []
    # one listing per write step, one for the finalize step
    assert len(lists) == 3 + 1


def test_finalization_reads_the_manifests_a_write_step_returned_unlike_the_stored_ones(
    dagster_instance,
    fanout_env,  # noqa: F811
    s3_bucket,
    s3_proxy,
    monkeypatch,
):
    from refiner_dagster.writer import DatasetWriter

    write_shards = DatasetWriter.write_shards

    def returning_other_counters(self, *args, **kwargs):
        written, kept = write_shards(self, *args, **kwargs)
        if not written:
            return written, kept
        inflated = dict(
            written[0].counters, rows_written=10_000 + written[0].counters.get("rows_written", 0)
        )
        return [dataclasses.replace(written[0], counters=inflated), *written[1:]], kept

    monkeypatch.setattr(DatasetWriter, "write_shards", returning_other_counters)
    monkeypatch.setenv(defs.BASE_ENV, f"s3://{s3_bucket}/data")
    monkeypatch.setenv(defs.S3_ENDPOINT_ENV, s3_proxy.endpoint_url)
    result = dg.materialize(
        [defs.frames], instance=dagster_instance, resources={"refiner": defs.refiner_resource()}
    )
    assert result.success
    version = published("frames")
    # the stored manifests count the rows, not what the write steps said
    assert version.summary().rows_written == len(expected_rows())
    assert rows_of(version) == expected_rows()
    gets, _ = _manifest_requests(s3_proxy)
    # one altered manifest per write step, each read from the store once
    assert len(gets) == 3 and len(set(gets)) == 3


def test_the_pointer_does_not_move_when_another_run_finalized_the_version_meanwhile(
    dagster_instance,
    fanout_env,  # noqa: F811
    monkeypatch,
):
    from refiner_dagster import writer

    reduce = writer.reduce_version

    def reduced_then_taken_over(version, persisted=None):
        summary = reduce(version, persisted)
        taken = dataclasses.replace(summary, run_id="intruder0001")
        taken.write(version.output_folder())  # another run's finalization, meanwhile
        return summary

    monkeypatch.setattr(writer, "reduce_version", reduced_then_taken_over)
    result = dg.materialize(
        [defs.frames_once],
        instance=dagster_instance,
        resources={"refiner": defs.refiner_resource()},
        raise_on_error=False,
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    message = str(failure.event_specific_data.error)
    assert "OwnershipLost" in message and "run intruder0001 took the output folder" in message
    storage = defs.refiner_resource().storage()
    assert storage.current(["frames_once"], None) is None  # nothing published
