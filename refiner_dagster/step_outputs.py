"""Removing a fan-out run's step outputs once its version is published.

The plan, the task lists and the write steps' manifest lists travel between the steps
of :func:`~refiner_dagster.build_dataset_asset` through the steps' IO manager; with
the default ``fs_io_manager`` they are pickles under
``$DAGSTER_HOME/storage/<run id>/<step key>/``. They matter only until the version is
published: re-executing a *failed* run from failure loads them from that run (so a
failed run keeps them), while the manifests themselves are persisted with the
version. So the finalize step, as its last act after publishing, removes this asset's
plan and write step outputs of its run and of the runs it re-executed (whose outputs
it loaded). A filesystem step IO manager (``fs_io_manager``, ``FilesystemIOManager``)
is cleaned this way; other IO managers (``S3PickleIOManager``) keep their objects, to
be expired by the store (an S3 lifecycle rule on the prefix).

Example:
    >>> step_dirs_of(["frames.frames_plan", "frames.frames_write[task_00001]",
    ...               "frames.frames_finalize", "other.other_plan"], "frames", "frames")
    ['frames.frames_plan', 'frames.frames_write[task_00001]']
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable

import dagster as dg

__all__ = ["remove_step_outputs", "step_dirs_of"]


def step_dirs_of(names: Iterable[str], node: str, asset_name: str) -> list[str]:
    """Which of a run's step folders hold the plan or write outputs of ``asset_name``
    (its graph node is ``node``)."""
    prefixes = (f"{node}.{asset_name}_plan", f"{node}.{asset_name}_write")
    return sorted(n for n in names if n.startswith(prefixes))


def _run_lineage(instance: dg.DagsterInstance, run: dg.DagsterRun) -> list[str]:
    """This run's id and those of the runs it re-executes, newest first."""
    ids = [run.run_id]
    parent = run.parent_run_id
    while parent and parent not in ids:
        ids.append(parent)
        parent_run = instance.get_run_by_id(parent)
        parent = parent_run.parent_run_id if parent_run is not None else None
    return ids


def remove_step_outputs(context: dg.OpExecutionContext, step_io_key: str, asset_name: str) -> None:
    """Delete ``asset_name``'s plan and write step outputs of this run and its parents,
    when the step IO manager keeps them on the local filesystem. Never fails the step."""
    step_io = getattr(context.resources, step_io_key, None)
    base_dir = getattr(step_io, "base_dir", None)
    if not isinstance(step_io, dg.UPathIOManager) or not isinstance(base_dir, str):
        context.log.debug(
            f"step outputs kept: {step_io_key!r} is {type(step_io).__name__}, not a filesystem "
            "IO manager; expire them on the store"
        )
        return
    node = str(context.op_handle).rsplit(".", 1)[0] if context.op_handle.parent else asset_name
    removed = 0
    for run_id in _run_lineage(context.instance, context.run):
        run_dir = os.path.join(base_dir, run_id)
        if not os.path.isdir(run_dir):
            continue
        for name in step_dirs_of(os.listdir(run_dir), node, asset_name):
            shutil.rmtree(os.path.join(run_dir, name), ignore_errors=True)
            removed += 1
        with contextlib.suppress(OSError):  # only when nothing else of the run is left
            os.rmdir(run_dir)
    if removed:
        context.log.info(
            f"removed {removed} step output folder(s) of {asset_name} under {base_dir}"
        )
