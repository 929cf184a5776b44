"""Pipelines that try to leak the keys of their environment; run as a separate process.

``python -m tests.reliability.leak_attempts WORKDIR S3_ENDPOINT BUCKET`` runs, in a
process started with planted keys in its environment (so ``/proc/self/environ``
holds them, as it would for a real launcher): local writes whose rows point at
``/proc/self/environ`` and a symlink to it under every missing policy, at it through
chained fsspec URLs (``simplecache::`` and the like) and at a copy of it on ``/dev/shm``
through a symlink, ``read_blob``/``read_blobs`` of it and of the chains, clean writes, S3 writes
with the planted credentials, a model server echoing the key JSON-escaped, and Dagster
materializations through the blob IO manager (clean and hostile). Every
logger runs at DEBUG into ``WORKDIR/logs/debug.log``. What each attempt raised goes to
``WORKDIR/errors.json`` and the Dagster event logs to ``WORKDIR/event_logs.json``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path

import dagster as dg

import refiner_core as mdr
import refiner_dagster as rd
from tests.core.inference.provider_server import Fault, ProviderServer
from tests.core.inference.support import FAST_RETRY

UNEXPECTED_SUCCESS = "UNEXPECTED SUCCESS"
DTYPES = {"img": mdr.datatype.image_path()}
CHAINS = (
    "simplecache::file:///proc/self/environ",
    "filecache::file:///proc/self/environ",
    "blockcache::/proc/self/environ",
)


def escaped(secret: str) -> str:
    """``secret`` as a server would echo it with every character JSON-escaped."""
    return "".join(f"\\u{ord(c):04x}" for c in secret)


def error_text(exc: BaseException) -> str:
    parts = ["".join(traceback.format_exception(exc))]
    while exc is not None:
        parts += [str(exc), repr(exc), *getattr(exc, "__notes__", [])]
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


def expect_failure(errors: list[str], run) -> None:
    """Run ``run``, keeping the text of the error it must raise (or noting that it did
    not, so the scan still runs and reports what leaked)."""
    try:
        run()
    except Exception as exc:
        errors.append(error_text(exc))
    else:
        errors.append(UNEXPECTED_SUCCESS)


def media(workdir: Path) -> list[str]:
    folder = workdir / "media"
    folder.mkdir()
    paths = []
    for i in range(4):
        path = folder / f"frame-{i}.png"
        path.write_bytes(bytes([i]) * (100 + i))
        paths.append(str(path))
    (folder / "innocent.png").symlink_to("/proc/self/environ")
    return paths


def write(workdir: Path, rows: list[str], out: str, assets, **options):
    return (
        mdr.from_items([{"i": i, "img": p} for i, p in enumerate(rows)], dtypes=DTYPES)
        .write_parquet(out, assets=assets, **options)
        .launch_local(num_workers=1, rundir=str(workdir / "runs" / Path(out).name))
    )


def local_and_s3(workdir: Path, errors: list[str], endpoint: str, bucket: str) -> None:
    paths = media(workdir)
    hostile = [*paths, "/proc/self/environ", str(workdir / "media" / "innocent.png")]
    for policy, mode in [
        ("error", mdr.BlobAssetConfig),
        ("set_null", mdr.FileAssetConfig),
        ("drop_row", mdr.BlobAssetConfig),
    ]:
        out = str(workdir / "out" / f"hostile-{policy}-{mode.__name__}")
        config = mode(missing_policy=policy)
        expect_failure(errors, lambda out=out, config=config: write(workdir, hostile, out, config))
    write(workdir, paths, str(workdir / "out" / "clean-blob"), mdr.BlobAssetConfig())
    write(workdir, paths, str(workdir / "out" / "clean-file"), mdr.FileAssetConfig())
    options = {
        "key": os.environ["AWS_ACCESS_KEY_ID"],
        "secret": os.environ["AWS_SECRET_ACCESS_KEY"],
        "endpoint_url": endpoint,
        "client_kwargs": {"region_name": "us-east-1"},
    }
    write(workdir, paths, f"s3://{bucket}/clean", mdr.BlobAssetConfig(), storage_options=options)
    expect_failure(
        errors,
        lambda: write(
            workdir,
            hostile,
            f"s3://{bucket}/hostile",
            mdr.BlobAssetConfig(),
            storage_options=options,
        ),
    )


@contextlib.contextmanager
def environ_on_dev_shm(workdir: Path, name: str) -> Iterator[Path | None]:
    """A symlink ``media/<name>`` under ``workdir`` to a copy of this process's
    environment on the ``/dev/shm`` tmpfs (``None`` where it is not a mount); the copy
    is removed afterwards."""
    if not os.path.ismount("/dev/shm"):
        yield None
        return
    copy = Path("/dev/shm") / f"refiner-leak-{uuid.uuid4().hex}"
    copy.write_bytes(Path("/proc/self/environ").read_bytes())
    link = workdir / "media" / name
    link.symlink_to(copy)
    try:
        yield link
    finally:
        copy.unlink()


def wrapped_and_shared(workdir: Path, errors: list[str]) -> int:
    """Writes of the environment through URL chains and ``/dev/shm``, blob reads of it
    directly and through URL chains; how many attempts were made."""
    paths = sorted(str(p) for p in (workdir / "media").glob("frame-*.png"))
    with environ_on_dev_shm(workdir, "shared.png") as shared:
        sources = [*CHAINS, *([str(shared)] if shared is not None else [])]
        for n, source in enumerate(sources):
            out = str(workdir / "out" / f"wrapped-{n}")
            config = (mdr.BlobAssetConfig if n % 2 else mdr.FileAssetConfig)(
                missing_policy="set_null"
            )
            rows = [paths[0], source]
            expect_failure(errors, lambda out=out, c=config, r=rows: write(workdir, r, out, c))
        for source in ["/proc/self/environ", *CHAINS]:
            ref = {"path": source, "offset": 0, "size": 4096}
            expect_failure(errors, lambda ref=ref: mdr.read_blob(ref))
        ref = {"path": sources[0], "offset": 0, "size": 64}
        expect_failure(errors, lambda: mdr.read_blobs([None, ref]))
    return len(sources) + len(CHAINS) + 2


def inference(workdir: Path, errors: list[str]) -> None:
    key = os.environ["OPENAI_API_KEY"]
    with ProviderServer(api_key=key) as server:
        body = json.dumps({"error": {"message": "bad request for key KEY"}})
        server.enqueue(Fault(status=400, body=body.replace("KEY", escaped(key)).encode()))

        async def annotate(row, generate):
            reply = await generate(messages=[{"role": "user", "content": "hi"}])
            return {"text": reply.text}

        generator = mdr.inference.generate_text(
            fn=annotate,
            provider=mdr.inference.OpenAIResponsesProvider(
                model="gpt-4.1", base_url=server.base_url
            ),
            retry=FAST_RETRY,
        )
        pipeline = mdr.from_items([{"i": 0}]).map_async(generator)
        expect_failure(
            errors,
            lambda: pipeline.write_parquet(str(workdir / "out" / "inference")).launch_local(
                rundir=str(workdir / "runs" / "inference")
            ),
        )


def dagster(workdir: Path, errors: list[str]) -> list[str]:
    paths = sorted(str(p) for p in (workdir / "media").glob("frame-*.png"))

    def asset_of(name: str, rows: list[str]):
        @dg.asset(name=name, io_manager_key="refiner")
        def _asset() -> mdr.Pipeline:
            return mdr.from_items([{"i": i, "img": p} for i, p in enumerate(rows)], dtypes=DTYPES)

        return _asset

    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=1)}
    home = os.environ["DAGSTER_HOME"]
    overrides = {"telemetry": {"enabled": False}}
    with (
        dg.instance_for_test(temp_dir=home, overrides=overrides) as instance,
        environ_on_dev_shm(workdir, "shared-dagster.png") as shared,
    ):
        hostile = [("hostile", "/proc/self/environ"), ("hostile_chain", CHAINS[0])]
        if shared is not None:
            hostile.append(("hostile_shm", str(shared)))
        ok = dg.materialize([asset_of("clean", paths)], instance=instance, resources=resources)
        if not ok.success:
            errors.append("clean materialization failed")
        runs = [ok]
        for name, source in hostile:
            bad = dg.materialize(
                [asset_of(name, [*paths, source])],
                instance=instance,
                resources=resources,
                raise_on_error=False,
            )
            if bad.success:
                errors.append(UNEXPECTED_SUCCESS)
            runs.append(bad)
        return [str(record) for run in runs for record in instance.all_logs(run.run_id)]


def main(workdir: Path, endpoint: str, bucket: str) -> None:
    (workdir / "logs").mkdir(parents=True)
    logging.basicConfig(
        filename=workdir / "logs" / "debug.log",
        level=logging.DEBUG,
        format="%(process)d %(name)s %(levelname)s %(message)s",
    )
    errors: list[str] = []
    local_and_s3(workdir, errors, endpoint, bucket)
    attempts = wrapped_and_shared(workdir, errors)
    inference(workdir, errors)
    event_logs = dagster(workdir, errors)
    (workdir / "errors.json").write_text(json.dumps(errors))
    (workdir / "wrapped_attempts.txt").write_text(str(attempts))
    (workdir / "event_logs.json").write_text(json.dumps(event_logs))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
