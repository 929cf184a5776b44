"""A fan-out run whose run worker is SIGKILLed between write steps is finished by
re-executing it from failure: the same version, every shard committed once, published.

The run is a real ``dg.execute_job`` in a child Python process on the test's SQLite
instance (every step in that process); the test kills it with SIGKILL while its second
write step runs, marks the run failed as Dagster's run monitoring would, then
re-executes it from failure.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import dagster as dg
import pytest

from refiner_dagster.storage import short_run_id
from tests.dagster import fanout_defs as defs
from tests.dagster.test_fanout import fanout_env  # noqa: F401

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = """
import dagster as dg
from tests.dagster import fanout_defs as defs
with dg.DagsterInstance.get() as instance:
    dg.execute_job(dg.reconstructable(defs.frames_once_in_process_job), instance=instance)
"""


def _wait_for(path: str, process: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert process.poll() is None, f"the run ended (exit {process.returncode}) first"
        assert time.monotonic() < deadline, f"no {path} after {timeout:g} s"
        time.sleep(0.1)


@pytest.mark.timeout(300)
def test_reexecution_after_sigkill_finishes_the_version(
    dagster_instance,
    fanout_env,  # noqa: F811 (the fixture imported above)
    monkeypatch,
):
    log = fanout_env[defs.LOG_ENV]
    # row 4 is the first row of write step task_00001 (task_00000 wrote rows 0-3)
    monkeypatch.setenv(defs.FAULT_ENV, "stall:4")
    worker = subprocess.Popen([sys.executable, "-c", RUN], cwd=ROOT, env=dict(os.environ))
    try:
        _wait_for(os.path.join(log, "fault-stall-4"), worker)
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=60)
    assert worker.returncode == -signal.SIGKILL

    (parent,) = dagster_instance.get_runs()
    assert parent.status == dg.DagsterRunStatus.STARTED  # nobody told Dagster it died
    storage = defs.refiner_resource().storage()
    assert storage.current(["frames_once"], None) is None  # nothing published
    version = f"v-{short_run_id(parent.run_id)}"
    assert storage.version(["frames_once"], None, version).state == "writing"
    # what run monitoring does on finding the run worker gone
    dagster_instance.report_run_failed(parent)
    before = set(os.listdir(log))

    options = dg.ReexecutionOptions.from_failure(parent.run_id, dagster_instance)
    with dg.execute_job(
        dg.reconstructable(defs.frames_once_job),
        instance=dagster_instance,
        reexecution_options=options,
    ) as resumed:
        assert resumed.success
        ran = sorted(e.step_key for e in resumed.all_events if e.event_type_value == "STEP_START")
    # Dagster re-runs the interrupted write step but leaves out task_00002, which the
    # killed run never started; the finalize step writes its shards
    assert ran == [
        "frames_once.frames_once_finalize",
        "frames_once.frames_once_write[task_00001]",
    ]
    rows = sorted(int(n.split("-")[1]) for n in set(os.listdir(log)) - before if "-" in n)
    assert rows == list(range(4, 12))  # task_00000's committed shards were not written again

    final = defs.published("frames_once")
    assert final.name == version  # the killed run's version, finished
    assert final.state == "published"
    assert final.summary().shards == 6
    assert defs.rows_of(final) == defs.expected_rows()
