"""Fan-out steps read each attempt manifest once: a write step only its own shards',
finalization every one of them once, counted at the moto S3 server through a proxy."""

from __future__ import annotations

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


def test_write_steps_read_only_their_shards_and_finalization_reads_each_once(
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
    # manifest; the finalize step read each of the 6 once for counting and reducing
    assert len(gets) == shards and len(set(gets)) == shards
    # one listing per write step, one for the finalize step
    assert len(lists) == 3 + 1
