"""A lease that fences: a run that lost its output folder deletes and overwrites nothing.

Two hazards, each with real launcher processes on local disk and moto S3:

- a launch SIGSTOPped inside finalization for longer than its lease while a second
  run takes the folder over and finishes, then SIGCONTed;
- a second launch whose ownership clock runs 200 s ahead of the live owner's.

In every trial the winner's rows and files stay exactly as it left them, and the
loser fails naming the winner.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
import traceback
import types

import psutil
import pytest

import refiner_core as mdr
from refiner_core.io import DataFolder
from refiner_core.io import ownership as ownership_module
from refiner_core.io.ownership import current_owner
from refiner_core.sinks import finalize as finalize_module
from tests.s3_fixtures import *  # noqa: F403

ROWS = 24
LEASE_S = 1.0
# past the lease by more than S3's one-second LastModified resolution
STALE_WAIT_S = LEASE_S + 2.5
SKEW_S = 200.0
PAUSE_POINTS = ("before-summary", "before-deletions")


@pytest.fixture(params=["local", "s3"])
def output(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "out"), None
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/out", request.getfixturevalue("s3_storage_options")


def _pipeline(first: int, delay_s: float = 0.0) -> mdr.Pipeline:
    def row(r):
        time.sleep(delay_s)
        return {"v": r["i"] * 3}

    return mdr.from_items([{"i": first + i} for i in range(ROWS)], items_per_shard=6).map(row)


def _stop_self_first(function):
    """``function`` that SIGSTOPs the launcher the first time it is called."""
    launcher = os.getpid()

    def paused(*args, **kwargs):
        if os.getpid() == launcher:
            os.kill(launcher, signal.SIGSTOP)
        return function(*args, **kwargs)

    return paused


def _pause_at(point: str) -> None:
    """Make the finalization of this process stop itself at ``point`` (both points lie
    past the single ownership check made before committing)."""
    if point == "before-summary":
        finalize_module.retry_open_uploads = _stop_self_first(finalize_module.retry_open_uploads)
    else:
        stage = finalize_module.FinalizeStage
        stage._remove_orphans = _stop_self_first(stage._remove_orphans)


def _launch(
    url,
    options,
    rundir,
    result_file,
    *,
    first,
    delay_s=0.0,
    pause=None,
    skew_s=0.0,
    lease_s=LEASE_S,
):
    code = 1
    outcome: dict = {"ok": False}
    try:
        if pause is not None:
            _pause_at(pause)
        if skew_s:  # this process's ownership clock runs ahead, nothing else
            real = time.time
            ownership_module.time = types.SimpleNamespace(time=lambda: real() + skew_s)
        stats = (
            _pipeline(first, delay_s)
            .write_parquet(url, storage_options=options)
            .launch_local(num_workers=2, rundir=rundir, owner_stale_after_s=lease_s)
        )
        outcome = {"ok": True, "run_id": stats.run_id}
        code = 0
    except BaseException as exc:
        outcome = {"ok": False, "type": type(exc).__name__, "error": traceback.format_exc()}
    finally:
        with open(result_file, "w") as f:
            json.dump(outcome, f)
        os._exit(code)


def _start(tmp_path, name, url, options, **kwargs):
    ctx = multiprocessing.get_context("fork")
    result = str(tmp_path / f"{name}.json")
    process = ctx.Process(
        target=_launch, args=(url, options, str(tmp_path / name), result), kwargs=kwargs
    )
    process.start()
    return process, result


def _finish(process, result_file, timeout=120) -> dict:
    process.join(timeout=timeout)
    assert process.exitcode is not None, "the launch did not end"
    with open(result_file) as f:
        return json.load(f)


def _wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _stopped(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.NoSuchProcess:
        return False


def _landed(folder: DataFolder) -> dict[str, bytes]:
    """Every file of the output with its bytes."""
    return {relative: folder.read_bytes(relative) for relative in folder.find()}


def _rows(url, options) -> list[int]:
    return sorted(r["i"] for r in mdr.read_parquet(url, storage_options=options).iter_rows())


def _paused_takeover_trial(output, tmp_path, point: str) -> None:
    url, options = output
    folder = DataFolder(url, options)
    loser, loser_result = _start(tmp_path, "loser", url, options, first=0, pause=point)
    try:
        _wait_until(lambda: _stopped(loser.pid), 90, "the first run to pause in finalization")
        time.sleep(STALE_WAIT_S)  # no heartbeat meanwhile: the folder may be taken over
        winner, winner_result = _start(tmp_path, "winner", url, options, first=1000)
        won = _finish(winner, winner_result)
        assert won["ok"], won.get("error")
        before = _landed(folder)
        assert _rows(url, options) == list(range(1000, 1000 + ROWS))
    finally:
        os.kill(loser.pid, signal.SIGCONT)
    lost = _finish(loser, loser_result)

    assert not lost["ok"] and lost["type"] == "OwnershipLost", lost
    assert f"run {won['run_id']} took it over" in lost["error"]
    after = _landed(folder)
    assert sorted(set(before) - set(after)) == []  # the loser deleted nothing
    assert {k: v for k, v in after.items() if before.get(k) != v} == {}  # nor overwrote
    assert _rows(url, options) == list(range(1000, 1000 + ROWS))
    summary = json.loads(folder.read_bytes("_refiner/summary.json"))
    assert summary["run_id"] == won["run_id"]
    assert summary["files"] and all(folder.exists(f) for f in summary["files"])


def _skewed_clock_trial(output, tmp_path) -> None:
    url, options = output
    folder = DataFolder(url, options)
    # both keep the default lease: only the skewed clock could make the owner look stale
    lease = ownership_module.DEFAULT_STALE_AFTER_S
    owner, owner_result = _start(
        tmp_path, "owner", url, options, first=0, delay_s=0.08, lease_s=lease
    )
    _wait_until(
        lambda: (o := current_owner(folder)) is not None and o.pid == owner.pid,
        60,
        "the first run to take the folder",
    )
    owner_run = current_owner(folder).run_id
    skewed, skewed_result = _start(
        tmp_path, "skewed", url, options, first=1000, skew_s=SKEW_S, lease_s=lease
    )
    refused = _finish(skewed, skewed_result)
    assert owner.is_alive(), "the first run ended before the skewed one tried"
    assert not refused["ok"] and refused["type"] == "OutputFolderBusy", refused
    assert f"run {owner_run}" in refused["error"]
    done = _finish(owner, owner_result)
    assert done["ok"], done.get("error")
    assert _rows(url, options) == list(range(ROWS))
    summary = json.loads(folder.read_bytes("_refiner/summary.json"))
    assert summary["run_id"] == owner_run
    assert all(folder.exists(f) for f in summary["files"])
    assert not [f for f in folder.find() if "1000" in f]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("point", PAUSE_POINTS)
def test_a_run_paused_in_finalization_past_its_lease_deletes_nothing(output, tmp_path, point):
    _paused_takeover_trial(output, tmp_path, point)


@pytest.mark.timeout(300)
def test_a_run_whose_clock_runs_ahead_cannot_take_a_live_folder(output, tmp_path):
    _skewed_clock_trial(output, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("point", PAUSE_POINTS)
def test_paused_takeovers_ten_trials(output, tmp_path, point):
    for trial in range(10):
        trial_dir = tmp_path / f"trial{trial}"
        trial_dir.mkdir()
        _paused_takeover_trial(_trial_output(output, trial), trial_dir, point)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_skewed_clocks_ten_trials(output, tmp_path):
    for trial in range(10):
        trial_dir = tmp_path / f"trial{trial}"
        trial_dir.mkdir()
        _skewed_clock_trial(_trial_output(output, trial), trial_dir)


def _trial_output(output, trial: int):
    url, options = output
    return f"{url}-{trial}", options
