"""The media guide's samples, run as written, on folders of their test.

The samples read ``/data/videos.parquet`` and write ``/tmp/out``. A test that uses them
runs its body in a child pytest inside a private mount namespace
(:mod:`tests.private_mounts`) where ``/data`` and ``/tmp/out`` are bind mounts of two
folders of the test; the parent test passes or fails with the child.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.private_mounts import Bind, PrivateMountsUnavailable, run_with_binds

SAMPLE_DATA = Path("/data")
SAMPLE_INPUT = SAMPLE_DATA / "videos.parquet"
SAMPLE_OUTPUT = Path("/tmp/out")
ENV = "REFINER_TEST_SAMPLE_MOUNTS"
CHILD_TIMEOUT_S = 300


@dataclass(frozen=True)
class SampleMounts:
    """The folders a sample test sees as ``/data`` and ``/tmp/out``, and its child's tmp."""

    data: Path
    output: Path
    child_tmp: Path

    @classmethod
    def under(cls, folder: Path) -> SampleMounts:
        mounts = cls(folder / "data", folder / "out", folder / "child")
        for path in (mounts.data, mounts.output):
            path.mkdir()
        return mounts

    def binds(self) -> list[Bind]:
        return [Bind(self.data, SAMPLE_DATA), Bind(self.output, SAMPLE_OUTPUT)]

    def to_json(self) -> str:
        return json.dumps({"data": str(self.data), "output": str(self.output)})


def mounted_here() -> bool:
    """Whether this process is a sample test's child, with its folders at the samples' paths.

    A child whose paths are not its folders stops here, before writing anything there.
    """
    value = os.environ.get(ENV)
    if not value:
        return False
    folders = json.loads(value)
    for target, source in ((SAMPLE_DATA, folders["data"]), (SAMPLE_OUTPUT, folders["output"])):
        try:
            same = os.path.samefile(target, source)
        except OSError:
            same = False
        if not same:
            raise RuntimeError(
                f"{ENV} is set but {target} is not the test folder {source}: the sample tests "
                f"are run by their parent test in a private mount namespace; unset {ENV}"
            )
    return True


def run_in_namespace(nodeid: str, mounts: SampleMounts, rootdir: Path) -> None:
    """Runs the test ``nodeid`` in a child pytest that sees ``mounts`` at the samples' paths."""
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--basetemp",
        str(mounts.child_tmp),
        nodeid,
    ]
    env = {**os.environ, ENV: mounts.to_json()}
    try:
        done = run_with_binds(argv, mounts.binds(), cwd=rootdir, env=env, timeout=CHILD_TIMEOUT_S)
    except PrivateMountsUnavailable as exc:
        pytest.fail(f"cannot run the seed sample {nodeid}: {exc}", pytrace=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the seed sample {nodeid} took over {CHILD_TIMEOUT_S} s", pytrace=False)
    output = done.stdout + done.stderr
    if done.returncode != 0 or "1 passed" not in done.stdout:
        pytest.fail(
            f"{nodeid} failed in its private mount namespace (exit {done.returncode}):\n"
            f"{output[-8000:]}",
            pytrace=False,
        )
