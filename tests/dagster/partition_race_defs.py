"""Two runs of one dataset partition, ordered by gates so that their race is the same each time.

The run tagged ``fast`` begins its version first and finishes once the run tagged
``slow`` has begun its own; the ``slow`` run writes its rows only once the test opens
the gate file (after the ``fast`` run has ended). Both are the same partition of the same
asset: a fan-out dataset asset (``race_fanout``), or an IO-manager asset with its
finalization asset (``race_written`` / ``race_written_finalized``).
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import dagster as dg

import refiner_core as mdr
import refiner_dagster as rd

BASE_ENV = "REFINER_RACE_BASE"
GATE_ENV = "REFINER_RACE_GATE"
ROLE_TAG = "refiner-test/role"
PARTITION = "a"
PARTS = dg.StaticPartitionsDefinition(["a", "b"])
_WAIT_S = 120.0


def refiner() -> rd.RefinerBlobIOManager:
    return rd.RefinerBlobIOManager(base_url=os.environ[BASE_ENV], num_workers=1)


def _wait_for(what: str, ready: Any) -> None:
    deadline = time.monotonic() + _WAIT_S
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(0.05)


def _versions(name: str) -> int:
    return len(refiner().storage().versions([name], PARTITION))


def _gate(role: str, name: str, row: mdr.Row) -> dict[str, Any]:
    if role == "fast":  # finish only once the rival run has begun its version
        _wait_for("the slow run's version", lambda: _versions(name) >= 2)
    else:
        gate = os.path.join(os.environ[GATE_ENV], "go")
        _wait_for(gate, lambda: os.path.exists(gate))
    return {"role": role}


def race_pipeline(context: Any, name: str) -> mdr.Pipeline:
    role = context.run.tags[ROLE_TAG]
    if role == "slow":  # begin after the fast run did
        _wait_for("the fast run's version", lambda: _versions(name) >= 1)
    items = [{"i": i} for i in range(4)]
    return mdr.from_items(items, items_per_shard=2).map(functools.partial(_gate, role, name))


race_fanout = rd.build_dataset_asset(
    functools.partial(race_pipeline, name="race_fanout"),
    name="race_fanout",
    partitions_def=PARTS,
    max_tasks=2,
)


@dg.asset(io_manager_key="refiner", partitions_def=PARTS)
def race_written(context) -> mdr.Pipeline:
    return race_pipeline(context, "race_written")


race_written_finalized = rd.build_finalization_asset(race_written)

ASSETS = {
    "fanout": [race_fanout],
    "io_manager": [race_written, race_written_finalized],
}
