"""The run dir: a launch's identity and the completed shards a relaunch skips.

``<rundir>/run.json`` holds the run id and the worker count the run was planned for;
``<rundir>/stage-NNN/<shard>.json`` is the manifest of each completed shard. Every file
is written whole or not at all, so a launch killed at any moment leaves a run dir the
next launch resumes.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any

from ..manifests import AttemptManifest
from ..manifests._attempts import new_run_id
from .fingerprint import RunFingerprint


def write_json_atomic(path: str, value: dict[str, Any]) -> None:
    """Write ``path`` whole or not at all: a temporary file, flushed, then renamed."""
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(value, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_state(path: str, key: str, *, what: str, fix: str) -> dict[str, Any]:
    """A run-dir JSON file that must hold ``key``; a ``ValueError`` naming it and the fix."""
    problem: str | None
    try:
        with open(path) as f:
            value = json.load(f)
        problem = None if isinstance(value, dict) and key in value else f"holds no {key!r}"
    except ValueError as exc:
        value, problem = None, f"is not valid JSON ({exc})"
    if problem is not None or not isinstance(value, dict):
        raise ValueError(f"{path} ({what}) {problem}, so this rundir cannot be resumed. {fix}")
    return value


class RunDir:
    """Completion markers that let a relaunch skip finished shards.

    Without a ``path`` nothing can resume the run, so it keeps its progress in memory
    only: no folder, no files, no fingerprint."""

    def __init__(
        self, path: str | None, name: str, workers: int = 1, *, fresh: bool = False
    ) -> None:
        self.path = path
        self._completed: dict[int, dict[str, AttemptManifest]] = {}
        self.fingerprint: RunFingerprint | None = None
        self.run_id: str = new_run_id()
        self.plan_workers: int = workers
        if path is not None:
            self._open(path, name, fresh=fresh)

    def _open(self, path: str, name: str, *, fresh: bool) -> None:
        """Take over the run recorded in ``path``, or start recording this one there."""
        if fresh and os.path.isdir(path):
            shutil.rmtree(path)
        os.makedirs(path, exist_ok=True)
        self.fingerprint = RunFingerprint(path)
        state_file = os.path.join(path, "run.json")
        if os.path.exists(state_file):
            state = read_state(
                state_file,
                "run_id",
                what="the run's state",
                fix=f"Delete the rundir {path!r} to start the run over, and launch again",
            )
            self.run_id = state["run_id"]
            # plans depend on the worker count: a relaunch plans as the first launch did,
            # so every shard id names the same rows (run dirs from before had no minimum)
            self.plan_workers = state.get("plan_workers", 1)
        else:
            write_json_atomic(
                state_file,
                {
                    "run_id": self.run_id,
                    "name": name,
                    "created_at": time.time(),
                    "plan_workers": self.plan_workers,
                },
            )

    def _stage_dir(self, index: int) -> str | None:
        return None if self.path is None else os.path.join(self.path, f"stage-{index:03d}")

    def completed(self, index: int) -> dict[str, AttemptManifest]:
        """Manifests of the stage's completed shards: read from disk once (earlier runs
        of this rundir), then kept up to date by :meth:`mark`."""
        done = self._completed.get(index)
        if done is None:
            done = self._completed[index] = self._read_markers(index)
        return done

    def _read_markers(self, index: int) -> dict[str, AttemptManifest]:
        done: dict[str, AttemptManifest] = {}
        directory = self._stage_dir(index)
        if directory is None:
            return done
        os.makedirs(directory, exist_ok=True)
        for name in os.listdir(directory):
            if name.endswith(".json") and not name.startswith("."):
                path = os.path.join(directory, name)
                data = read_state(
                    path,
                    "shard_id",
                    what="a completed shard's marker",
                    fix="Delete the file (that shard is then run again) and launch again",
                )
                manifest = AttemptManifest.from_json(data, where=path)
                done[manifest.shard_id] = manifest
        return done

    def mark(self, index: int, manifest: AttemptManifest) -> None:
        """Record ``manifest``'s shard of stage ``index`` as completed."""
        done = self.completed(index)
        directory = self._stage_dir(index)
        if directory is not None:
            marker = os.path.join(directory, f"{manifest.shard_id}.json")
            write_json_atomic(marker, manifest.to_json())
        done[manifest.shard_id] = manifest
