"""Dagster test fixtures: a real instance on a temporary DAGSTER_HOME, telemetry off.

- ``dagster_home``: a temporary folder with ``dagster.yaml`` (telemetry disabled),
  exported as ``DAGSTER_HOME`` for the test.
- ``dagster_instance``: a persistent ``dg.instance_for_test`` on that folder (SQLite
  storage, so the multiprocess executor and ``dg.execute_job`` work).
- the moto S3 fixtures of ``tests.s3_fixtures`` (``s3_server``, ``s3_bucket``,
  ``s3_storage_options``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import dagster as dg
import pytest

from tests.s3_fixtures import s3_bucket, s3_proxy, s3_server, s3_storage_options  # noqa: F401

os.environ["DAGSTER_DISABLE_TELEMETRY"] = "1"

TELEMETRY_OFF = {"telemetry": {"enabled": False}}


def _ram_dir() -> str | None:
    """A RAM-backed temp folder when the OS has one: SQLite storage is much faster there."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


@pytest.fixture(scope="session")
def _instance_template() -> Iterator[str]:
    """A DAGSTER_HOME whose SQLite storages exist already; copying it beats re-creating them."""
    template = tempfile.mkdtemp(prefix="dagster-template-", dir=_ram_dir())
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_DISABLE_TELEMETRY", "1")
        with dg.instance_for_test(temp_dir=template, overrides=TELEMETRY_OFF) as instance:
            instance.get_runs(limit=1)
    try:
        yield template
    finally:
        shutil.rmtree(template, ignore_errors=True)


@pytest.fixture
def dagster_home(_instance_template: str, monkeypatch) -> Iterator[str]:
    root = tempfile.mkdtemp(prefix="dagster-home-", dir=_ram_dir())
    home = os.path.join(root, "home")
    shutil.copytree(_instance_template, home)
    with open(os.path.join(home, "dagster.yaml"), "w") as f:
        f.write("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", home)
    monkeypatch.setenv("DAGSTER_DISABLE_TELEMETRY", "1")
    try:
        yield home
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def dagster_instance(dagster_home: str) -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test(temp_dir=dagster_home, overrides=TELEMETRY_OFF) as instance:
        yield instance


@pytest.fixture
def media(tmp_path):
    """Small source media files: ``media(n)`` -> list of (path, bytes), deterministic."""

    def make(n: int = 6, *, folder: str = "media") -> list[tuple[str, bytes]]:
        root = tmp_path / folder
        root.mkdir(exist_ok=True)
        files = []
        for i in range(n):
            data = bytes((i * 37 + j) % 256 for j in range(10 + 7 * i))
            path = root / f"frame_{i:03d}.png"
            path.write_bytes(data)
            files.append((str(path), data))
        return files

    return make
