"""S3 faults through a loopback fault proxy in front of moto: nothing lost, nothing left open.

Every trial packs real media into multipart blocks on S3 (5 MiB parts), with one
fault injected at the proxy. Transient faults must be retried to success; persistent
ones must fail the stage with an error naming the S3 operation, the object, the
attempts and the stage, and a resume after the store recovers must finish the
output. Either way the bucket is then judged as stored: every input row exactly once,
every reference reading its source bytes, no orphan or partial object, no open
multipart upload.
"""

from __future__ import annotations

import json
import random
import re

import pytest

import refiner_core as mdr
from tests.reliability.s3_outcome import judge
from tests.s3_fixtures import *  # noqa: F403

MiB = 2**20
ROWS = 12
RETRIES = {"max_attempts": 2, "mode": "standard"}  # fast botocore retries, still retried


def _media(tmp_path, seed: int) -> dict[int, tuple[str, bytes]]:
    """``ROWS`` local media files of about 1 MiB with seeded contents."""
    rng = random.Random(seed)
    media = {}
    for i in range(ROWS):
        data = rng.randbytes(MiB + rng.randrange(4096))
        path = tmp_path / f"seed{seed}-clip{i:02d}.bin"
        path.write_bytes(data)
        media[i] = (str(path), data)
    return media


def _write(media, out: str, options: dict, rundir: str):
    pipeline = mdr.from_items(
        [{"id": i, "media": path} for i, (path, _) in media.items()],
        items_per_shard=6,
        dtypes={"media": mdr.datatype.file_path()},
    )
    return pipeline.write_parquet(
        out, assets=mdr.BlobAssetConfig(target_bytes=12 * MiB), storage_options=options
    ).launch_local(num_workers=1, rundir=rundir)


def stats_run_id(rundir: str) -> str:
    with open(f"{rundir}/run.json") as f:
        return json.load(f)["run_id"]


def _options(proxy) -> dict:
    return proxy.storage_options(default_block_size=5 * MiB, config_kwargs={"retries": RETRIES})


TRANSIENT = {
    "failed UploadPart": dict(kind="UploadPart", fault="fail", times=1),
    "slow UploadPart": dict(kind="UploadPart", fault="delay", times=4, delay_s=0.3),
    "dropped UploadPart": dict(kind="UploadPart", fault="drop", times=1),
    "failed CompleteMultipartUpload": dict(kind="CompleteMultipartUpload", fault="fail", times=1),
    "failed PutObject": dict(kind="PutObject", fault="fail", times=1),
    "dropped PutObject": dict(kind="PutObject", fault="drop", times=1),
}


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", sorted(TRANSIENT))
def test_transient_faults_are_retried_to_an_exact_output(
    name, seed, tmp_path, s3_server, s3_bucket, s3_proxy
):
    media = _media(tmp_path, seed)
    fault = s3_proxy.inject(**TRANSIENT[name])
    out = f"s3://{s3_bucket}/out"
    stats = _write(media, out, _options(s3_proxy), str(tmp_path / "run"))
    assert fault.hits >= 1, f"the {name} fault never hit a request"
    assert stats.summary.counters["rows_written"] == ROWS
    outcome = judge(
        s3_server, s3_bucket, "out", {i: d for i, (_, d) in media.items()}, _options(s3_proxy)
    )
    print(f"FAULT {name} seed={seed}: {outcome}")
    assert (outcome.rows_lost, outcome.rows_duplicated) == (0, 0)
    assert outcome.orphans == [] and outcome.partial == [] and outcome.open_uploads == []
    assert outcome.bad_references == []


PERSISTENT = {
    "UploadPart": dict(kind="UploadPart", fault="fail"),
    "CompleteMultipartUpload": dict(kind="CompleteMultipartUpload", fault="fail"),
    "PutObject": dict(kind="PutObject", fault="fail"),
    # the owner record and the layout record come first
    "PutObject after planning": dict(kind="PutObject", fault="fail", after=2),
    "dropped UploadPart": dict(kind="UploadPart", fault="drop"),
}


@pytest.mark.parametrize("name", sorted(PERSISTENT))
def test_persistent_faults_fail_naming_the_operation_then_resume_exactly(
    name, tmp_path, s3_server, s3_bucket, s3_proxy
):
    media = _media(tmp_path, 7)
    out = f"s3://{s3_bucket}/out"
    rundir = str(tmp_path / "run")
    s3_proxy.inject(**PERSISTENT[name])
    with pytest.raises(OSError if name == "PutObject" else mdr.StageFailed) as failed:
        _write(media, out, _options(s3_proxy), rundir)
    message = str(failed.value).split("\n\n", 1)[0]
    operation = PERSISTENT[name]["kind"]
    if name == "PutObject":  # the first PutObject is the owner record, before any stage
        assert failed.value.__notes__ == [
            f"raised while taking the output folder {out} for refiner (run {stats_run_id(rundir)})"
        ]
    else:
        assert message.startswith(f"stage 0 (write_parquet {out}) failed on shard ")
    assert re.search(rf"S3 {operation}( \d+)? of s3://{s3_bucket}/out/\S+ failed", message)
    assert re.search(r"after \d+ (attempts?|tries by s3fs)", message), message
    assert s3_server.open_uploads(s3_bucket) == [], "a failed write left its upload open"

    s3_proxy.clear_faults()
    stats = _write(media, out, _options(s3_proxy), rundir)
    assert stats.summary.counters["rows_written"] == ROWS
    outcome = judge(
        s3_server, s3_bucket, "out", {i: d for i, (_, d) in media.items()}, _options(s3_proxy)
    )
    print(f"FAULT persistent {name}: {outcome}")
    assert (outcome.rows_lost, outcome.rows_duplicated) == (0, 0)
    assert outcome.orphans == [] and outcome.partial == [] and outcome.open_uploads == []
    assert outcome.bad_references == []


def test_an_upload_whose_abort_failed_is_aborted_at_finalization(
    tmp_path, s3_server, s3_bucket, s3_proxy
):
    media = _media(tmp_path, 11)
    out = f"s3://{s3_bucket}/out"
    rundir = str(tmp_path / "run")
    s3_proxy.inject("UploadPart", "fail", part_number=2)
    s3_proxy.inject("AbortMultipartUpload", "fail")
    with pytest.raises(mdr.StageFailed, match="UploadPart 2"):
        _write(media, out, _options(s3_proxy), rundir)
    left_open = s3_server.open_uploads(s3_bucket)
    assert len(left_open) >= 1, "the injected abort failure left no upload open"
    records = [k for k in s3_server.keys(s3_bucket) if "/_refiner/open_uploads/" in k]
    assert records, "the attempt did not record the upload it could not abort"

    # The store recovers for writes but aborts still fail: the summary reports them.
    s3_proxy.clear_faults()
    s3_proxy.inject("AbortMultipartUpload", "fail")
    stats = _write(media, out, _options(s3_proxy), rundir)
    still_open = stats.summary.open_uploads
    assert {u["upload_id"] for u in still_open} == {u["UploadId"] for u in left_open}
    assert all(u["url"].startswith(f"s3://{s3_bucket}/out/assets/") for u in still_open)
    assert all(u["fix"].startswith("fs.abort_mpu(") for u in still_open)

    # Aborts work again: the next finalization (a resume) aborts every recorded upload.
    s3_proxy.clear_faults()
    stats = _write(media, out, _options(s3_proxy), rundir)
    assert stats.summary.open_uploads == ()
    assert stats.summary.counters["uploads_aborted"] == len(left_open)
    outcome = judge(
        s3_server, s3_bucket, "out", {i: d for i, (_, d) in media.items()}, _options(s3_proxy)
    )
    print(f"FAULT failed AbortMultipartUpload: {outcome}")
    assert (outcome.rows_lost, outcome.rows_duplicated) == (0, 0)
    assert outcome.orphans == [] and outcome.partial == [] and outcome.open_uploads == []
    assert outcome.bad_references == []
