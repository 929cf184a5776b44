"""Shared test settings."""

import multiprocessing.forkserver
import os

import pytest

os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")


@pytest.fixture
def fresh_forkserver():
    """For a test that starts forkserver workers: Python's fork server (one per process,
    keeping the environment it started with) is stopped afterwards, so a later test,
    e.g. Dagster's multiprocess executor, starts one with its own environment."""
    yield
    multiprocessing.forkserver._forkserver._stop()
