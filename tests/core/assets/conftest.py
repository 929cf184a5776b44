"""Fixtures of the asset tests: the media guide's samples on folders of their own, and
write capture.

A test that takes ``samples`` runs twice over: in this session the fixture only makes
two folders and :func:`pytest_pyfunc_call` hands the test to a child pytest in a private
mount namespace where they are ``/data`` and ``/tmp/out`` (``sample_mounts.py``); in the
child the fixture writes ``/data/videos.parquet`` (real videos referenced) and the body
runs. The machine's ``/data`` and ``/tmp/out`` are never written, so test sessions on one
machine run side by side.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr

from .media import write_videos
from .sample_mounts import SAMPLE_INPUT, SAMPLE_OUTPUT, SampleMounts, mounted_here, run_in_namespace

SAMPLE_EPISODES = 6


def _empty(folder: Path) -> None:
    """Removes what ``folder`` holds; the folder itself is a mount point and stays."""
    for child in folder.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


@pytest.fixture
def samples(tmp_path):
    """``/data/videos.parquet`` (6 real videos referenced) and an empty ``/tmp/out``.

    Outside the namespace: the :class:`SampleMounts` the test's child will see there.
    """
    if not mounted_here():
        yield SampleMounts.under(tmp_path)
        return
    videos = write_videos(tmp_path / "sample-media", SAMPLE_EPISODES)
    table = pa.table(
        {
            "episode": pa.array(range(SAMPLE_EPISODES), pa.int64()),
            "video": pa.array(videos, pa.string()),
            "num_frames": pa.array([3] * SAMPLE_EPISODES, pa.int64()),
        }
    )
    pq.write_table(table, SAMPLE_INPUT)
    _empty(SAMPLE_OUTPUT)
    yield {"videos": videos, "input": SAMPLE_INPUT, "output": SAMPLE_OUTPUT}


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Runs a sample test's body in its private mount namespace instead of here."""
    mounts = pyfuncitem.funcargs.get("samples")
    if not isinstance(mounts, SampleMounts):
        return None
    run_in_namespace(pyfuncitem.nodeid, mounts, pyfuncitem.config.rootpath)
    return True


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
