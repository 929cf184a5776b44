"""Two test sessions run the media guide's samples at the same time, on a machine whose
``/data`` and ``/tmp/out`` hold someone else's files, and leave those alone.

Both sessions run in a namespace where those two paths are read-only folders of this
test (the "machine"), so any write there fails the sessions.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.private_mounts import Bind, command_with_binds, raise_if_mounts_failed

from .sample_mounts import ENV, SAMPLE_DATA, SAMPLE_OUTPUT

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = "tests/core/assets/test_seed_samples.py"
TESTS = ("test_file_asset_config_sample", "test_blob_asset_config_sample")


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")}


def test_two_sessions_run_the_samples_at_once_and_leave_the_machine_paths_alone(tmp_path):
    machine_data, machine_out = tmp_path / "machine-data", tmp_path / "machine-out"
    machine_data.mkdir()
    machine_out.mkdir()
    (machine_data / "videos.parquet").write_bytes(b"someone else's table")
    (machine_out / "keep.txt").write_bytes(b"someone else's output")
    before = (_files(machine_data), _files(machine_out))
    machine = [
        Bind(machine_data, SAMPLE_DATA, read_only=True),
        Bind(machine_out, SAMPLE_OUTPUT, read_only=True),
    ]
    env = {k: v for k, v in os.environ.items() if k != ENV}

    sessions = []
    for i in range(2):
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        argv += ["--basetemp", str(tmp_path / f"session-{i}")]
        argv += [f"{SAMPLES}::{name}" for name in TESTS]
        sessions.append(
            subprocess.Popen(
                command_with_binds(argv, machine),
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = [session.communicate(timeout=600) for session in sessions]

    for session, (out, err) in zip(sessions, results, strict=True):
        raise_if_mounts_failed(session.returncode, err)
        assert session.returncode == 0 and f"{len(TESTS)} passed" in out, (out + err)[-8000:]
    assert (_files(machine_data), _files(machine_out)) == before
