"""Seeded SIGKILLs of a real launch, a resume, and an audit of what landed.

A trial forks a launcher process (its own process group) that runs a small
write with media (blob-packed or copied files), installs one fault in itself
before it launches, and so in the workers it forks: at a seeded point (reading a
block, in the middle of a block, after a data file before its manifest, during
finalization) it SIGKILLs the launcher, its own worker or the whole group. The
trial then waits until no process of that group is alive, resumes the run from
its run dir in this process, and audits the output: rows lost and duplicated,
references that do not read their source bytes, orphan files, temporary files.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pyarrow.parquet as pq

import refiner_core as mdr
from refiner_core.execution import stages as stages_module
from refiner_core.io import datafile as datafile_module
from refiner_core.sinks import finalize as finalize_module
from refiner_core.sources import items as items_module

ROWS = 24
ROWS_PER_SHARD = 6
BLOCK_ROWS = 2
WORKERS = 2
POINTS = ("reading", "mid-block", "before-manifest", "finalization")
TARGETS = ("launcher", "worker", "group")
GONE_WITHIN_S = 15.0


@dataclass(frozen=True)
class Fault:
    """Where and whom to SIGKILL: the ``occurrence``-th event of ``point`` in ``shard``."""

    point: str
    target: str
    shard: str
    occurrence: int
    launcher_pid: int

    def fire(self) -> None:
        if self.target == "group":
            os.killpg(os.getpgid(0), signal.SIGKILL)
        elif self.target == "worker" or os.getpid() == self.launcher_pid:
            os.kill(os.getpid(), signal.SIGKILL)
        else:  # the launcher, from one of its workers (which then carries on)
            os.kill(self.launcher_pid, signal.SIGKILL)


FAULT: Fault | None = None  # set only in a trial's forked launcher (and its workers)
_COUNTS: dict[tuple[str, str], int] = {}


def _event(point: str, shard: str) -> None:
    if FAULT is None or FAULT.point != point or FAULT.shard != shard:
        return
    seen = _COUNTS.get((point, shard), 0)
    _COUNTS[(point, shard)] = seen + 1
    if seen == FAULT.occurrence:
        FAULT.fire()


def mid_block(row: Any) -> dict[str, Any]:
    """The pipeline's one step: a row in the middle of a block is a fault point."""
    _event("mid-block", f"{row['i'] // ROWS_PER_SHARD:05d}")
    return {"label": f"row-{row['i']}"}


def _install_fault_points() -> None:
    """Wrap the engine's reading, manifest and finalization calls (this process only)."""
    read = items_module.ItemsSource.read

    def reading(self, shard, **kwargs):
        for block in read(self, shard, **kwargs):
            _event("reading", shard.id)
            yield block

    persist = stages_module.WriteStage.persist

    def before_manifest(self, manifest):
        _event("before-manifest", manifest["shard_id"])
        return persist(self, manifest)

    finalize = finalize_module.FinalizeStage._finalize
    active = [False]

    def finalizing(self, *args, **kwargs):
        active[0] = True
        try:
            return finalize(self, *args, **kwargs)
        finally:
            active[0] = False

    def counted(method):
        def wrapper(self, *args, **kwargs):
            if active[0]:
                _event("finalization", "-")
            return method(self, *args, **kwargs)

        return wrapper

    items_module.ItemsSource.read = reading
    stages_module.WriteStage.persist = before_manifest
    finalize_module.FinalizeStage._finalize = finalizing
    datafile_module.DataFolder.rm = counted(datafile_module.DataFolder.rm)
    datafile_module.DataFolder.write_bytes = counted(datafile_module.DataFolder.write_bytes)


def make_media(folder: Path, seed: int = 7) -> list[str]:
    """``ROWS`` small files of distinct, seeded bytes; returns their paths."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(ROWS):
        path = folder / f"frame-{i:03d}.png"
        path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(16, 400))))
        paths.append(str(path))
    return paths


def sequence(media: list[str], out: str, mode: str) -> mdr.PipelineSequence:
    """The trial's write: ``i``, an image column and a label; media packed or copied."""
    rows = [{"i": i, "image": media[i]} for i in range(ROWS)]
    assets = mdr.BlobAssetConfig(target_bytes=600) if mode == "blobs" else mdr.FileAssetConfig()
    pipeline = mdr.from_items(
        rows, items_per_shard=ROWS_PER_SHARD, dtypes={"image": mdr.datatype.image_path()}
    )
    return pipeline.with_max_block_rows(BLOCK_ROWS).map(mid_block).write_parquet(out, assets=assets)


def seeded_fault(point: str, target: str, seed: int, launcher_pid: int) -> Fault:
    rng = random.Random(f"{point}/{target}/{seed}")
    shard = f"{rng.randrange(ROWS // ROWS_PER_SHARD):05d}"
    if point == "reading":
        occurrence = rng.randrange(ROWS_PER_SHARD // BLOCK_ROWS)
    elif point == "mid-block":
        occurrence = rng.randrange(ROWS_PER_SHARD)
    elif point == "before-manifest":
        occurrence = 0
    else:  # summary writes and deletions of the earlier run's files
        shard, occurrence = "-", rng.randrange(12)
    return Fault(point, target, shard, occurrence, launcher_pid)


@dataclass
class TrialResult:
    seed: int
    first_exit: str
    rows_lost: int = 0
    rows_duplicated: int = 0
    bad_references: int = 0
    orphans: list[str] = field(default_factory=list)
    temp_files: list[str] = field(default_factory=list)
    live_processes: list[int] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (
            self.rows_lost
            or self.rows_duplicated
            or self.bad_references
            or self.orphans
            or self.temp_files
            or self.live_processes
        )


def _first_launch(media: list[str], out: str, rundir: str, mode: str, point, target, seed) -> int:
    """Fork the launcher into its own process group; returns its pid."""
    pid = os.fork()
    if pid == 0:  # the launcher
        code = 1
        try:
            os.setpgid(0, 0)
            global FAULT
            FAULT = seeded_fault(point, target, seed, os.getpid())
            _install_fault_points()
            # forked workers inherit the armed fault (another start method would not)
            sequence(media, out, mode).launch_local(
                num_workers=WORKERS, rundir=rundir, start_method="fork"
            )
            code = 0
        except BaseException:
            with open(os.path.join(rundir, "launcher-error.txt"), "w") as f:
                f.write(traceback.format_exc())
        finally:
            os._exit(code)
    with contextlib.suppress(PermissionError, ProcessLookupError):
        os.setpgid(pid, pid)  # unless the child already did (or is gone)
    return pid


def _group_members(pgid: int) -> list[int]:
    alive = []
    for process in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(process.pid) == pgid and process.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(process.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return alive


def _wait_group_gone(pgid: int) -> list[int]:
    deadline = time.monotonic() + GONE_WITHIN_S
    while time.monotonic() < deadline:
        alive = _group_members(pgid)
        if not alive:
            return []
        time.sleep(0.02)
    return _group_members(pgid)


def prior_run(media: list[str], out: str, mode: str) -> None:
    """A completed earlier run in ``out`` (its rows shifted by 1000), which the trial's
    finalization replaces: deleting its files gives finalization its fault points."""
    rows = [{"i": 1000 + i, "image": media[i]} for i in range(ROWS)]
    assets = mdr.BlobAssetConfig(target_bytes=600) if mode == "blobs" else mdr.FileAssetConfig()
    pipeline = mdr.from_items(
        rows, items_per_shard=ROWS_PER_SHARD, dtypes={"image": mdr.datatype.image_path()}
    )
    pipeline.write_parquet(out, assets=assets).launch_local(num_workers=1)


def run_trial(base: Path, media: list[str], point: str, target: str, seed: int) -> TrialResult:
    mode = "blobs" if seed % 2 == 0 else "files"
    trial = base / f"{point}-{target}-{seed}"
    out, rundir = str(trial / "out"), str(trial / "run")
    os.makedirs(rundir)
    if point == "finalization":
        prior_run(media, out, mode)
    pid = _first_launch(media, out, rundir, mode, point, target, seed)
    _, status = os.waitpid(pid, 0)
    first_exit = (
        f"signal {os.WTERMSIG(status)}"
        if os.WIFSIGNALED(status)
        else f"exit {os.WEXITSTATUS(status)}"
    )
    result = TrialResult(seed=seed, first_exit=first_exit)
    result.live_processes = _wait_group_gone(pid)
    sequence(media, out, mode).launch_local(num_workers=WORKERS, rundir=rundir)
    audit(result, Path(out), Path(rundir), media, mode)
    return result


def audit(result: TrialResult, out: Path, rundir: Path, media: list[str], mode: str) -> None:
    """Count rows lost/duplicated, references off their source bytes, orphans, temp files."""
    rows = [row for row in mdr.read_parquet(str(out)).iter_rows()]
    ids = [row["i"] for row in rows]
    result.rows_lost = len(set(range(ROWS)) - set(ids)) + len([i for i in ids if i >= ROWS])
    result.rows_duplicated = len(ids) - len(set(ids))
    for row in rows:
        expected = Path(media[row["i"] % 1000]).read_bytes()
        if mode == "blobs":
            got = mdr.read_blob(row["image"])
        else:
            got = Path(row["image"]).read_bytes()
        result.bad_references += got != expected or row["label"] != f"row-{row['i']}"
    listed = json.loads((out / "_refiner" / "summary.json").read_text())
    kept = set(listed["files"])
    asset_dirs = tuple(f"{d}/" for d in listed["asset_dirs"])
    committed = {f"{m}.json" for m in _committed_keys(out, listed)}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        relative = str(path.relative_to(out))
        if path.name.endswith(".tmp") or path.name.startswith("."):
            result.temp_files.append(relative)
        elif relative.startswith("_refiner/attempts/"):
            if path.name not in committed:
                result.orphans.append(relative)
        elif relative.startswith("_refiner/"):
            continue
        elif relative not in kept and not relative.startswith(asset_dirs):
            result.orphans.append(relative)
    for f in listed["files"]:
        if not (out / f).exists():
            result.orphans.append(f"listed but missing: {f}")
        else:
            pq.read_metadata(out / f)
    result.temp_files += [str(p) for p in rundir.rglob("*.tmp")]


def _committed_keys(out: Path, summary: dict[str, Any]) -> set[str]:
    """``<shard>__<attempt>`` of the committed attempts (the names of their data files)."""
    return {Path(f).stem for f in summary["files"]}


def table_line(point: str, target: str, results: list[TrialResult]) -> str:
    return (
        f"| SIGKILL {target:<8} at {point:<15} | {len(results):>3} | "
        f"{sum(r.rows_lost for r in results):>4} | {sum(r.rows_duplicated for r in results):>4} | "
        f"{sum(len(r.orphans) for r in results):>4} | {sum(len(r.temp_files) for r in results):>4} |"
    )
