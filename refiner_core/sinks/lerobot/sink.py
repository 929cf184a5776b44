"""``write_lerobot``: episode rows become a LeRobot v3.0 dataset."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...manifests import AttemptManifest
from ...manifests._attempts import parse_attempt_key
from ...validation import check_positive
from ..files import FolderSink
from ..protocol import AttemptKey, Committed, Leftovers
from .attempt import STAGE_DIR, LeRobotAttemptWriter
from .commit import INFO_PATH, commit_dataset, dataset_files


class LeRobotSink(FolderSink):
    """Writes a LeRobot v3.0 dataset (``meta/``, ``data/``, ``videos/``) under ``output``
    from episode rows (their shape: :mod:`refiner_core.sinks.lerobot.episodes`) or frame
    rows like ``read_lerobot(root)``'s (see :mod:`refiner_core.sinks.lerobot.frame_rows`).

    Each shard attempt stages its episodes under ``<output>/_refiner/lerobot/``: frames in
    Parquet, each camera's clips concatenated into MP4s (packets copied when the clip's
    format matches the file being filled, re-encoded otherwise; counted as
    ``clips_remuxed`` / ``clips_transcoded``). A remuxed clip keeps the image statistics
    its row carries (``stats/<camera>/<name>``, as ``read_lerobot(..., rows="episodes")``
    gives them; counted as ``clip_stats_reused``) unless ``recompute_stats``; otherwise, and
    for re-encoded clips, they come from a sample of decoded frames. The finalization stage numbers the episodes,
    frames and tasks over all shards, moves the files to
    ``data/chunk-XXX/file-XXX.parquet`` and ``videos/<camera>/chunk-XXX/file-XXX.mp4``, and
    writes ``meta/episodes``, ``meta/tasks.parquet``, ``meta/stats.json`` and, last,
    ``meta/info.json``.

    Example:
        >>> import tempfile, refiner_core as mdr
        >>> rows = [{"tasks": ["wave"], "observation.state": [[0.0, 1.0], [0.5, 1.5]]}]
        >>> out = tempfile.mkdtemp()
        >>> stats = mdr.from_items(rows).write_lerobot(out, fps=10).launch_local()
        >>> mdr.read_lerobot(out).take(2)[1]["observation.state"]
        [0.5, 1.5]
    """

    format = "lerobot"

    def __init__(
        self,
        output: str,
        *,
        fps: float,
        robot_type: str | None = None,
        video_files_size_in_mb: float = 200,
        data_files_size_in_mb: float = 100,
        chunks_size: int = 1000,
        storage_options: dict[str, Any] | None = None,
        clip_storage_options: dict[str, Any] | None = None,
        recompute_stats: bool = False,
    ) -> None:
        _check_above_zero("fps", fps)
        _check_above_zero("video_files_size_in_mb", video_files_size_in_mb)
        _check_above_zero("data_files_size_in_mb", data_files_size_in_mb)
        check_positive("write_lerobot chunks_size", chunks_size)
        super().__init__(output, storage_options=storage_options)
        self.fps = fps
        self.robot_type = robot_type
        self.video_files_size_in_mb = video_files_size_in_mb
        self.data_files_size_in_mb = data_files_size_in_mb
        self.chunks_size = chunks_size
        self.clip_storage_options = clip_storage_options
        if not isinstance(recompute_stats, bool):
            raise ValueError(
                f"write_lerobot: recompute_stats={recompute_stats!r}; pass True or False"
            )
        self.recompute_stats = recompute_stats

    def prepare(self, run_id: str) -> None:
        if self.folder.exists(INFO_PATH):
            raise FileExistsError(
                f"write_lerobot {self.url}: it already holds a LeRobot dataset "
                f"({INFO_PATH}); write into an empty folder or delete it first"
            )
        super().prepare(run_id)

    def open_attempt(self, shard_id: str, attempt_id: str, run_id: str) -> LeRobotAttemptWriter:
        return LeRobotAttemptWriter(self, shard_id, attempt_id)

    def commit(self, committed: list[AttemptManifest], run_id: str) -> Committed:
        """Commit the kept attempts (once: a later finalization finds ``meta/info.json``);
        its ``files`` are every file of the dataset, for the summary."""
        totals = {} if self.folder.exists(INFO_PATH) else commit_dataset(self, committed)
        return Committed(totals, tuple(dataset_files(self.folder)))

    def remove_leftovers(
        self, keep: set[AttemptKey], run_id: str, check: Callable[[], None]
    ) -> Leftovers:
        """Delete the staged episodes of attempts that are not kept (``check`` before each)."""
        leftovers = Leftovers()
        for name in self.folder.listdir(STAGE_DIR):
            key = parse_attempt_key(name)
            if key is not None and key not in keep:
                check()  # each staged attempt is one deletion batch
                self.folder.rm(f"{STAGE_DIR}/{name}", recursive=True)
                leftovers.rejected.add(key)
                leftovers.removed += 1
        return leftovers


def _check_above_zero(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"write_lerobot: {name}={value!r}; it must be a number above 0")
