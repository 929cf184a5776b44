"""The README's Dagster examples run as written (with their data pointed at test data)."""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr
from refiner_dagster.storage import short_run_id
from tests.dagster import fanout_defs

from .test_fanout import fanout_env  # noqa: F401

README = Path(__file__).resolve().parents[2] / "README.md"


def python_block(section: str) -> str:
    text = README.read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", body, flags=re.S)
    assert match, f"no python example under {section!r}"
    return match.group(1)


def test_your_own_data_example_materializes(dagster_instance, tmp_path: Path) -> None:
    videos = []
    for i in range(3):
        video = tmp_path / f"clip_{i}.mp4"
        video.write_bytes(bytes([i]) * (100 + i))
        videos.append(str(video))
    data = tmp_path / "episodes"
    data.mkdir()
    pq.write_table(pa.table({"episode": [0, 1, 2], "video": videos}), data / "part-0.parquet")

    code = python_block("Your own data in Dagster").replace("/data/episodes/", f"{data}/")
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    defs: dg.Definitions = namespace["defs"]
    result = dg.materialize(
        [*defs.assets, *defs.asset_checks],
        instance=dagster_instance,
        resources=dict(defs.resources),
    )
    assert result.success
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {"missing_assets": True, "reference_integrity": True}
    finalized = dagster_instance.get_latest_materialization_event(dg.AssetKey("episodes_finalized"))
    meta = finalized.asset_materialization.metadata
    rows = mdr.read_parquet(meta["dagster/uri"].value).materialize()
    blocks = {r["video"]["path"] for r in rows}  # one block per shard at most, for 3 videos
    assert meta["assets_written"].value == 3 and meta["blocks_written"].value == len(blocks)
    assert sorted(mdr.read_blob(r["video"]) for r in rows) == sorted(
        Path(v).read_bytes() for v in videos
    )


def python_block_with(marker: str) -> str:
    """The README's python example that contains ``marker``."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    found = [block for block in blocks if marker in block]
    assert len(found) == 1, f"{len(found)} python examples contain {marker!r}"
    return found[0]


@pytest.mark.usefixtures("fanout_env")
def test_reexecute_from_failure_example_finishes_a_failed_run(dagster_instance):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(fanout_defs.FAULT_ENV, "raise:7")  # one write step fails, once
        with dg.execute_job(
            dg.reconstructable(fanout_defs.frames_once_job), instance=dagster_instance
        ) as failed:
            assert not failed.success
    storage = fanout_defs.refiner_resource().storage()
    assert storage.current(["frames_once"], None) is None

    namespace: dict = {}
    code = python_block_with("ReexecutionOptions.from_failure")
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["reexecute_from_failure"](fanout_defs.frames_once_job, failed.run_id)

    [resumed] = [r for r in dagster_instance.get_runs() if r.parent_run_id == failed.run_id]
    started = dagster_instance.all_logs(resumed.run_id, of_type=dg.DagsterEventType.STEP_START)
    assert sorted(e.step_key for e in started) == [
        "frames_once.frames_once_finalize",
        "frames_once.frames_once_write[task_00001]",
    ]
    final = fanout_defs.published("frames_once")
    assert final.name == f"v-{short_run_id(failed.run_id)}"  # the failed run's version
    assert fanout_defs.rows_of(final) == fanout_defs.expected_rows()


def test_readme_names_no_dagster_command_that_does_not_exist():
    assert "reexecute --from-failure" not in README.read_text()
