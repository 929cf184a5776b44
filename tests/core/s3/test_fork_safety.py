"""Forked workers must not disturb the launching process's S3 event loop."""

from __future__ import annotations

import gc
import multiprocessing
import threading
import time

import fsspec.asyn
import s3fs

import refiner_core as mdr
from refiner_core.io import DataFolder
from refiner_core.io.datafile import _KEPT_ACROSS_FORK
from tests.s3_fixtures import *  # noqa: F403


def _child_drops_inherited_io() -> None:
    # What a worker does implicitly: fsspec forgets the parent's loop and instances
    # after a fork, and the first resolution in the child clears the instance cache.
    s3fs.S3FileSystem.clear_instance_cache()
    gc.collect()


def _parent_call_finishes(folder: DataFolder, timeout: float) -> float | None:
    """Seconds one S3 call takes in this process, or None if it hangs past ``timeout``."""
    took: list[float] = []

    def call() -> None:
        started = time.monotonic()
        folder.fs.exists(folder.join("not-there"))
        took.append(time.monotonic() - started)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(timeout)
    return took[0] if took else None


def _fork_a_child_after_s3_use(bucket: str, options: dict) -> DataFolder:
    def warm() -> None:  # the instance is referenced only by fsspec's cache afterwards
        DataFolder(f"s3://{bucket}/out", options).write_bytes("warm.txt", b"x")

    warm()
    child = multiprocessing.get_context("fork").Process(target=_child_drops_inherited_io)
    child.start()
    child.join(30)
    assert child.exitcode == 0
    return DataFolder(f"s3://{bucket}/out", options)


def test_parent_s3_calls_do_not_stall_after_a_forked_child(s3_bucket, s3_storage_options):
    folder = _fork_a_child_after_s3_use(s3_bucket, s3_storage_options)
    took = _parent_call_finishes(folder, timeout=10)
    assert took is not None and took < 2, f"S3 call in the parent took {took}"


def test_launch_local_leaves_the_parent_loop_working(tmp_path, s3_bucket, s3_storage_options):
    folder = _fork_a_child_after_s3_use(s3_bucket, s3_storage_options)
    media = tmp_path / "clip.bin"
    media.write_bytes(b"z" * 4096)
    mdr.from_items(
        [{"i": i, "clip": str(media)} for i in range(20)],
        items_per_shard=5,
        dtypes={"clip": mdr.datatype.file_path()},
    ).write_parquet(
        f"s3://{s3_bucket}/data", assets=mdr.BlobAssetConfig(), storage_options=s3_storage_options
    ).launch_local(num_workers=2)
    # what the fork hook keeps referenced for the children: fsspec's loop and the
    # cached filesystems (without it, a child's cleanup can unregister the parent's
    # descriptors from the epoll instance they share)
    assert fsspec.asyn.loop[0] is not None
    assert any(o is fsspec.asyn.loop[0] for o in _KEPT_ACROSS_FORK)
    assert any(isinstance(o, s3fs.S3FileSystem) for o in _KEPT_ACROSS_FORK)
    took = _parent_call_finishes(folder, timeout=10)
    assert took is not None and took < 2, f"S3 call in the parent took {took}"
