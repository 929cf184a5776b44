"""A fan-out job on the multiprocess executor with a preloaded forkserver, for a fresh process.

``tests.dagster.test_fanout_step_cost`` runs :func:`main` in a new interpreter (the
forkserver is one per process and keeps the environment it started with), which
executes :func:`small_plan_job` on the instance of ``DAGSTER_HOME`` and prints the
run's outcome as JSON.
"""

from __future__ import annotations

import json
import sys

import dagster as dg

import refiner_dagster as rd
from tests.dagster import fanout_defs as defs

# 6 shards of 2 rows; at least 4 shards per write step makes one write step
small_plan = rd.build_dataset_asset(defs.frames_pipeline, name="small_plan", min_shards_per_task=4)

FORKSERVER = dg.multiprocess_executor.configured(
    {
        "max_concurrent": 2,
        "start_method": {"forkserver": {"preload_modules": ["refiner_dagster.preload", __name__]}},
    }
)


def small_plan_job() -> dg.JobDefinition:
    job = dg.define_asset_job("small_plan_job", selection=[small_plan], executor_def=FORKSERVER)
    resources = {"refiner": defs.refiner_resource()}
    return dg.Definitions(assets=[small_plan], jobs=[job], resources=resources).resolve_job_def(
        "small_plan_job"
    )


def main() -> None:
    with dg.DagsterInstance.get() as instance:
        recon = dg.reconstructable(small_plan_job)
        with dg.execute_job(recon, instance=instance, raise_on_error=False) as result:
            succeeded = sorted(
                e.step_key
                for e in result.all_events
                if e.event_type_value == "STEP_SUCCESS" and e.step_key
            )
            json.dump({"success": result.success, "steps": succeeded}, sys.stdout)


if __name__ == "__main__":
    main()
