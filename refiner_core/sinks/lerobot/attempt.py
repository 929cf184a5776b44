"""One shard attempt of ``write_lerobot``: episodes staged under ``_refiner/lerobot/<attempt>/``.

The attempt writes its frames (``data-<n>.parquet``, episode and frame numbers counted from 0
in the attempt), its videos (``videos/<camera>/<n>.mp4``) and ``episodes.json`` (per episode:
length, tasks, data part, where each camera's clip landed, image statistics). Nothing of it
is part of the dataset until the finalization stage numbers and moves it (see ``commit``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ...io.datafile import is_local
from ...manifests import AttemptResult
from ...manifests._attempts import attempt_key
from ...video.clip_ref import parse_clip
from ...video.clips import ClipNotOnKeyframe
from ...video.concat import EncodedFile, IncompatibleClip, RemuxedFile, VideoFormat
from .carried_stats import carried_image_stats
from .episodes import RowShape, episode_length, frame_table, row_shape
from .frame_rows import FrameGrouper, is_frame_rows
from .stats import image_stats

STAGE_DIR = "_refiner/lerobot"
MIB = 1024 * 1024


def stage_of(shard_id: str, attempt_id: str) -> str:
    return f"{STAGE_DIR}/{attempt_key(shard_id, attempt_id)}"


class _Camera:
    """One camera's open files: the remuxed one and, for clips that cannot be copied, the
    encoded one; each rolls over to a new file past the size limit."""

    def __init__(self, writer: LeRobotAttemptWriter, key: str) -> None:
        self.writer, self.key = writer, key
        self.count = 0  # files started
        self.remuxed: tuple[int, RemuxedFile] | None = None
        self.encoded: tuple[int, EncodedFile] | None = None
        self.size: tuple[int, int] | None = None  # (width, height) of the camera
        self.info: dict[str, Any] | None = None
        self.uploaded: list[int] = []

    def _path(self, number: int) -> str:
        return f"{self.writer.tmp}/{self.key}-{number}.mp4"

    def append(self, clip: Any, where: str, sample: bool) -> tuple[int, Any, bool]:
        """Put ``clip`` in a file, decoding a sample of its frames for its statistics when
        ``sample`` or when it is re-encoded; returns (file number, where it landed, remuxed?)."""
        ref = parse_clip(clip)
        options, fps = self.writer.sink.clip_storage_options, self.writer.sink.fps
        if self.remuxed is None:
            self.remuxed = (self.count, RemuxedFile(self._path(self.count), fps, self.size))
            self.count += 1
        number, file = self.remuxed
        try:
            landed = file.append(ref, options, sample)
        except (ClipNotOnKeyframe, IncompatibleClip):
            pass  # encoded below
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from exc
        else:
            if self.size is None and file.format is not None:  # set by the clip just appended
                self.size = (file.format.width, file.format.height)
                self.info = _info(file.format.codec, file.format.pix_fmt, *self.size)
            self._roll("remuxed")
            return number, landed, True
        if self.size is None:
            with open_probe(ref, options) as fmt:
                self.size = (fmt.width, fmt.height)
        if self.encoded is None:
            path = self._path(self.count)
            self.encoded = (self.count, EncodedFile(path, fps, *self.size))
            self.count += 1
        number, encoded = self.encoded
        landed = encoded.append(ref, options)
        if self.info is None:
            self.info = _info(encoded.stream.codec_context.name, "yuv420p", *self.size)
        self._roll("encoded")
        return number, landed, False

    def _roll(self, which: str) -> None:
        held = getattr(self, which)
        if held[1].size() >= self.writer.sink.video_files_size_in_mb * MIB:
            self._finish(*held)
            setattr(self, which, None)

    def _finish(self, number: int, file: Any) -> None:
        file.close()
        if file.stream is None:  # never got a clip
            return
        staged = f"{self.writer.stage}/videos/{self.key}/{number}.mp4"
        size = os.path.getsize(file.path)
        if not _move_into(self.writer.sink.folder, file.path, staged):
            self._upload(file.path, staged)
        self.uploaded.append(number)
        self.writer.staged_bytes += size

    def _upload(self, path: str, staged: str) -> None:
        with (
            open(path, "rb") as local,
            self.writer.sink.folder.open_atomic(staged) as out,
        ):
            shutil.copyfileobj(local, out, 4 * MIB)

    def close(self) -> None:
        for held in (self.remuxed, self.encoded):
            if held is not None:
                self._finish(*held)
        self.remuxed = self.encoded = None


def _move_into(folder: Any, path: str, relative: str) -> bool:
    """Rename the local file ``path`` to ``relative`` in ``folder`` when both are on one
    local filesystem (no copy); ``False`` when they are not."""
    if not is_local(folder.fs):
        return False
    directory, _, name = relative.rpartition("/")
    try:
        os.replace(path, f"{folder.local_dir(directory)}/{name}")
    except OSError:  # another device: copied instead
        return False
    return True


@contextlib.contextmanager
def open_probe(ref: Any, options: dict[str, Any] | None):
    from ...video.container import open_video

    with open_video(ref.path, options) as (_, stream):
        yield VideoFormat.of(stream)


def _info(codec: str, pix_fmt: str | None, width: int, height: int) -> dict[str, Any]:
    return {"codec": codec, "pix_fmt": pix_fmt, "width": width, "height": height}


class LeRobotAttemptWriter:
    """Stages one shard attempt's episodes (see the module doc)."""

    # Episodes carry their own columns; an attempt without rows needs no schema.
    empty_schema: pa.Schema | None = None

    def __init__(self, sink: Any, shard_id: str, attempt_id: str) -> None:
        self.sink = sink
        self.where = f"{sink.describe()} shard {shard_id}"
        self.stage = stage_of(shard_id, attempt_id)
        self.tmp = tempfile.mkdtemp(prefix="refiner-lerobot-")
        self.shape: RowShape | None = None
        self.cameras: dict[str, _Camera] = {}
        self.episodes: list[dict[str, Any]] = []
        self.pending: list[pa.Table] = []
        self.parts = 0
        self.frames = 0
        self.staged_bytes = 0
        self.counters = {
            "clips_remuxed": 0,
            "clips_transcoded": 0,
            "clip_stats_reused": 0,
            "frames_decoded": 0,
        }
        self.grouper: FrameGrouper | None = None

    async def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if self.grouper is None and self.shape is None and is_frame_rows(table.schema):
            self.grouper = FrameGrouper(self.where)
        if self.grouper is None:
            self._episodes(table)
            return
        for episode in self.grouper.add(table):
            self._episodes(episode)

    def _episodes(self, table: pa.Table) -> None:
        if self.shape is None:
            self.shape = row_shape(table.schema, self.where)
            self.cameras = {key: _Camera(self, key) for key in self.shape.cameras}
        for row in range(table.num_rows):
            self._episode(table, row, self.shape)

    def _episode(self, table: pa.Table, row: int, shape: RowShape) -> None:
        where = f"{self.where} episode row {len(self.episodes)}"
        length = episode_length(table, row, shape, where)
        videos, stats = {}, {}
        for key, camera in self.cameras.items():
            clip = table.column(key)[row].as_py()
            if clip is None:
                raise ValueError(f"{where}: camera {key!r} has no clip; every episode needs one")
            carried = None
            if not self.sink.recompute_stats:
                carried = carried_image_stats(table, row, key, where)
            number, landed, remuxed = camera.append(
                clip, f"{where} camera {key!r}", sample=carried is None
            )
            self.counters["clips_remuxed" if remuxed else "clips_transcoded"] += 1
            self.counters["frames_decoded"] += landed.decoded
            if length is None:
                length = landed.frames
            ref = parse_clip(clip)
            span = ref.to_timestamp - ref.from_timestamp
            if abs(span * self.sink.fps - landed.frames) >= 0.5:
                raise ValueError(
                    f"{where}: the clip of camera {key!r} ({ref.describe()}) spans {span:g}s but "
                    f"holds {landed.frames} frames, {landed.frames / self.sink.fps:g}s at "
                    f"fps={self.sink.fps:g}; pass the video's frame rate as fps="
                )
            if landed.frames != length:
                raise ValueError(
                    f"{where}: the clip of camera {key!r} ({ref.describe()}) has "
                    f"{landed.frames} frames but the episode has {length}; fix its bounds"
                )
            videos[key] = {"file": number, "from": landed.from_timestamp, "to": landed.to_timestamp}
            if remuxed and carried is not None:  # the source's frames: its statistics hold
                stats[key] = carried
                self.counters["clip_stats_reused"] += 1
            else:
                stats[key] = image_stats(landed.sample, landed.frames)
        if length is None:
            raise ValueError(
                f"{where}: the episode has no length, frame lists or camera clips to count its "
                "frames; give a length column or a list per frame"
            )
        frames = frame_table(table, row, shape, length, self.sink.fps, where)
        local = len(self.episodes)
        frames = frames.append_column("episode_index", pa.array([local] * length, pa.int64()))
        frames = frames.append_column(
            "index", pa.array(range(self.frames, self.frames + length), pa.int64())
        )
        self.pending.append(frames)
        self.frames += length
        self.episodes.append(
            {
                "length": length,
                "tasks": table.column("tasks")[row].as_py(),
                "data_part": self.parts,
                "videos": videos,
                "image_stats": stats,
            }
        )
        if sum(t.nbytes for t in self.pending) >= self.sink.data_files_size_in_mb * MIB:
            self._flush_data()

    def _flush_data(self) -> None:
        if not self.pending:
            return
        table = pa.concat_tables(self.pending)
        with self.sink.folder.open_atomic(f"{self.stage}/data-{self.parts}.parquet") as f:
            pq.write_table(table, f)
            self.staged_bytes += f.tell()
        self.pending = []
        self.parts += 1

    async def close(self) -> AttemptResult:
        for episode in self.grouper.close() if self.grouper else ():
            self._episodes(episode)
        self._flush_data()
        for camera in self.cameras.values():
            camera.close()
        staged = {
            "episodes": self.episodes,
            "cameras": {k: c.info for k, c in self.cameras.items()},
            "files": {k: c.uploaded for k, c in self.cameras.items()},
        }
        self.sink.folder.write_bytes(f"{self.stage}/episodes.json", json.dumps(staged).encode())
        shutil.rmtree(self.tmp, ignore_errors=True)
        return AttemptResult(
            counters={
                **self.counters,
                "rows_written": len(self.episodes),
                "frames_written": self.frames,
                "files_written": self.parts + sum(len(c.uploaded) for c in self.cameras.values()),
                "bytes_written": self.staged_bytes,
            }
        )

    async def abort(self) -> None:
        for camera in self.cameras.values():
            for held in (camera.remuxed, camera.encoded):
                if held is not None:
                    with contextlib.suppress(Exception):
                        held[1].close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.sink.folder.rm(self.stage, recursive=True)
