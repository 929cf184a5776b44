"""Fixtures of the asset tests: the absolute paths the guide's samples use, and write capture."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr

from .media import write_videos

SAMPLE_INPUT = Path("/data/videos.parquet")
SAMPLE_OUTPUT = Path("/tmp/out")
SAMPLE_EPISODES = 6
MARKER = {b"refiner-tests": b"seed 000 sample input"}


def _ours(path: Path) -> bool:
    """Whether ``path`` is a sample input an interrupted test session left behind."""
    try:
        return (pq.read_schema(path).metadata or {}).get(b"refiner-tests") == MARKER[
            b"refiner-tests"
        ]
    except Exception:
        return False


def _aside(path: Path) -> Path | None:
    """Move an existing ``path`` out of the way; returns where it went."""
    if not path.exists() and not path.is_symlink():
        return None
    backup = path.with_name(f"{path.name}.refiner-test-backup-{uuid.uuid4().hex[:8]}")
    path.rename(backup)
    return backup


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


@pytest.fixture(scope="session")
def sample_paths(tmp_path_factory):
    """Creates ``/data/videos.parquet`` (real videos referenced) and frees ``/tmp/out``.

    Whatever was there before is moved aside and put back afterwards; a lock keeps
    two test sessions on this machine from using the paths at the same time.
    """
    lock_path = Path(tempfile.gettempdir()) / "refiner-seed-000-samples.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if SAMPLE_INPUT.is_file() and _ours(SAMPLE_INPUT):
            SAMPLE_INPUT.unlink()
            with contextlib.suppress(OSError):
                SAMPLE_INPUT.parent.rmdir()
        created_data = not SAMPLE_INPUT.parent.exists()
        SAMPLE_INPUT.parent.mkdir(parents=True, exist_ok=True)
        input_backup = _aside(SAMPLE_INPUT)
        output_backup = _aside(SAMPLE_OUTPUT)
        try:
            media = tmp_path_factory.mktemp("sample-media")
            videos = write_videos(media, SAMPLE_EPISODES)
            table = pa.table(
                {
                    "episode": pa.array(range(SAMPLE_EPISODES), pa.int64()),
                    "video": pa.array(videos, pa.string()),
                    "num_frames": pa.array([3] * SAMPLE_EPISODES, pa.int64()),
                },
                metadata=MARKER,
            )
            pq.write_table(table, SAMPLE_INPUT)
            yield {"videos": videos, "input": SAMPLE_INPUT, "output": SAMPLE_OUTPUT}
        finally:
            _remove(SAMPLE_OUTPUT)
            _remove(SAMPLE_INPUT)
            if input_backup is not None:
                input_backup.rename(SAMPLE_INPUT)
            if output_backup is not None:
                output_backup.rename(SAMPLE_OUTPUT)
            if created_data:
                with contextlib.suppress(OSError):
                    os.rmdir(SAMPLE_INPUT.parent)


@pytest.fixture
def samples(sample_paths):
    """The sample paths, with ``/tmp/out`` absent before and after the test."""
    _remove(SAMPLE_OUTPUT)
    yield sample_paths
    _remove(SAMPLE_OUTPUT)


@pytest.fixture
def written(monkeypatch):
    """Sequences returned by ``write_parquet`` calls, so a sample's write can be launched."""
    sequences: list[mdr.PipelineSequence] = []
    original = mdr.Pipeline.write_parquet

    def recording(self, *args, **kwargs):
        sequence = original(self, *args, **kwargs)
        sequences.append(sequence)
        return sequence

    monkeypatch.setattr(mdr.Pipeline, "write_parquet", recording)
    return sequences
