"""Two Dagster runs of one dataset partition at once: one publishes, the other is refused.

Each run is a real ``dg.materialize`` in its own process on one SQLite instance. The
run that finishes first publishes; the other fails with ``SupersededError`` naming the
winner, so no recorded materialization points at a version that was deleted.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
import traceback

import dagster as dg
import pytest

import refiner_dagster as rd
from refiner_dagster.storage import short_run_id
from tests.dagster import partition_race_defs as race
from tests.dagster.conftest import TELEMETRY_OFF


def _materialize(kind: str, role: str, home: str, result_file: str) -> None:
    code = 1
    try:
        os.environ["DAGSTER_HOME"] = home
        with dg.instance_for_test(temp_dir=home, overrides=TELEMETRY_OFF) as instance:
            result = dg.materialize(
                race.ASSETS[kind],
                instance=instance,
                partition_key=race.PARTITION,
                tags={race.ROLE_TAG: role},
                resources={"refiner": race.refiner()},
                raise_on_error=False,
            )
            errors = [
                str(e.event_specific_data.error)
                for e in result.all_events
                if e.event_type_value == "STEP_FAILURE"
            ]
            with open(result_file, "w") as f:
                json.dump([result.success, result.run_id, errors], f)
        code = 0
    except BaseException:
        with open(result_file, "w") as f:
            json.dump([False, None, [traceback.format_exc()]], f)
    finally:
        os._exit(code)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("kind", "keys"),
    [("fanout", ["race_fanout"]), ("io_manager", ["race_written", "race_written_finalized"])],
)
def test_two_runs_of_one_partition_publish_one_version(
    kind, keys, dagster_home, tmp_path, monkeypatch
):
    monkeypatch.setenv(race.BASE_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(race.GATE_ENV, str(tmp_path))
    ctx = multiprocessing.get_context("fork")
    results = {role: str(tmp_path / f"{role}.json") for role in ("fast", "slow")}
    runs = {
        role: ctx.Process(target=_materialize, args=(kind, role, dagster_home, result_file))
        for role, result_file in results.items()
    }
    for process in runs.values():
        process.start()
    runs["fast"].join(timeout=200)
    (tmp_path / "go").write_text("")  # the slow run finishes after the fast one has ended
    runs["slow"].join(timeout=200)
    outcome = {}
    for role, result_file in results.items():
        with open(result_file) as f:
            outcome[role] = json.load(f)
    fast_ok, fast_run, fast_errors = outcome["fast"]
    slow_ok, slow_run, slow_errors = outcome["slow"]
    assert fast_ok, fast_errors
    assert not slow_ok
    # the loser fails cleanly, naming the run and version that won
    assert len(slow_errors) == 1, slow_errors
    winner = f"v-{short_run_id(fast_run)}"
    assert "SupersededError" in slow_errors[0] and "was superseded" in slow_errors[0]
    assert f"run {fast_run}" in slow_errors[0] and winner in slow_errors[0]

    storage = race.refiner().storage()
    current = storage.current([keys[0]], race.PARTITION)
    assert current is not None and current.name == winner
    states = {v.name: v.state for v in storage.versions([keys[0]], race.PARTITION)}
    assert list(states.values()).count("published") == 1
    assert states[f"v-{short_run_id(slow_run)}"] != "published"

    with dg.instance_for_test(temp_dir=dagster_home, overrides=TELEMETRY_OFF) as instance:
        recorded = []
        for key in keys:
            records = instance.fetch_materializations(dg.AssetKey(key), limit=100).records
            for record in records:
                materialization = record.asset_materialization
                assert materialization is not None
                assert materialization.partition == race.PARTITION
                recorded.append((key, record.run_id, materialization.metadata["dagster/uri"]))
    # the winner recorded its materializations; the fan-out loser recorded none
    assert {(key, run) for key, run, _ in recorded} >= {(key, fast_run) for key in keys}
    if kind == "fanout":
        assert {run for _, run, _ in recorded} == {fast_run}
    # every recorded materialization points at a version that is still there
    for key, run, uri in recorded:
        assert os.path.isdir(uri.value), f"{key} materialized by run {run}: {uri.value} is gone"


def test_superseded_error_names_the_winner(tmp_path):
    from refiner_dagster.one_publisher import publishing

    storage = rd.DatasetStorage(str(tmp_path))
    first = storage.begin(["frames"], "a", "v-first", {"dagster_run_id": "run-first"})
    second = storage.begin(["frames"], "a", "v-second", {"dagster_run_id": "run-second"})
    assert second.record["base_version"] is None
    storage.publish(first)
    refused = pytest.raises(rd.SupersededError, match="run run-first published version v-first")
    with refused as e, publishing(second):
        storage.publish(second)
    assert (e.value.winner_run, e.value.winner_version) == ("run-first", "v-first")
    assert storage.current(["frames"], "a").name == "v-first"


def test_a_publication_waits_for_the_one_in_progress(tmp_path):
    from refiner_core.integration import OutputOwnership
    from refiner_dagster.one_publisher import publishing

    storage = rd.DatasetStorage(str(tmp_path))
    version = storage.begin(["frames"], "a", "v-mine", {"dagster_run_id": "run-mine"})
    other = OutputOwnership(version.folder, run_id="run-other")
    other.acquire()  # another run is publishing this partition
    events: list[str] = []
    releaser = threading.Timer(1.0, lambda: (events.append("released"), other.release()))
    releaser.start()
    started = time.monotonic()
    with publishing(version):
        events.append("publishing")
        storage.publish(version)
    releaser.join()
    assert events == ["released", "publishing"]
    assert time.monotonic() - started >= 1.0
    assert storage.current(["frames"], "a").name == "v-mine"
