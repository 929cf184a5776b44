"""The demo code location through the real ``dagster`` CLI and a real instance.

``demo_home`` runs ``scripts/demo.sh`` once per session in a fresh DAGSTER_HOME
(telemetry off), i.e. ``dagster asset materialize -m refiner_dagster.demo.definitions
--select '*'``; the tests then read what landed from the instance and from storage.
The web UI test reuses the same instance.
"""

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr
import refiner_dagster as rd
from refiner_dagster.demo.data import expected_counts, read_png_size

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FINALIZATIONS = (
    "episode_dataset_finalized",
    "episode_dataset_repacked_finalized",
    "episodes_with_gap_finalized",
)


@dataclass(frozen=True)
class DemoHome:
    """A DAGSTER_HOME where the whole demo was materialized by ``scripts/demo.sh``."""

    home: Path
    env: dict[str, str]
    stdout: str

    def instance(self) -> dg.DagsterInstance:
        return dg.DagsterInstance.from_config(str(self.home))

    def metadata(self, asset: str) -> dict:
        with self.instance() as instance:
            event = instance.get_latest_materialization_event(dg.AssetKey(asset))
        assert event is not None, f"{asset} was not materialized"
        return {k: getattr(v, "value", v) for k, v in event.asset_materialization.metadata.items()}


def dagster_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "REFINER_"))}
    env.update(
        DAGSTER_HOME=str(home),
        DAGSTER_DISABLE_TELEMETRY="1",
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        REFINER_PYTHON=sys.executable,
    )
    return env


def new_dagster_home(root: Path) -> Path:
    home = root / "dagster_home"
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return home


_MATERIALIZED: dict[str, DemoHome] = {}


@pytest.fixture(scope="session")
def demo_home(tmp_path_factory: pytest.TempPathFactory) -> DemoHome:
    # Other test modules import this fixture; the demo still runs once per session.
    if "demo" in _MATERIALIZED:
        return _MATERIALIZED["demo"]
    home = new_dagster_home(tmp_path_factory.mktemp("demo"))
    env = dagster_env(home)
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "demo.sh")],  # the README's command
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"demo.sh failed:\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
    _MATERIALIZED["demo"] = DemoHome(home=home, env=env, stdout=done.stdout)
    return _MATERIALIZED["demo"]


def test_definitions_validate(tmp_path: Path) -> None:
    home = new_dagster_home(tmp_path)
    done = subprocess.run(
        [str(BIN / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO,
        env=dagster_env(home),
        capture_output=True,
        text=True,
        timeout=180,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert "Validation successful for code location refiner_demo" in output
    # Loading the code location generates no data: that happens on first materialization.
    assert not (home / "refiner_demo").exists()


def test_demo_script_prints_outputs_and_ui(demo_home: DemoHome) -> None:
    out = demo_home.stdout
    assert "episode_dataset_repacked_finalized: rows_written=24, blobs_coalesced=" in out
    assert "episodes_with_gap_finalized: rows_written=24, missing_assets=1, cells_nulled=1" in out
    assert f"{demo_home.home}/storage/refiner/episode_dataset/v-" in out
    assert "dev -w" in out and "workspace.yaml" in out
    settings = (demo_home.home / "dagster.yaml").read_text()
    assert "telemetry:\n  enabled: false" in settings
    # The demo's instance opens its UI without the "join the community" dialog.
    assert "nux:\n  enabled: false" in settings


def test_demo_script_is_quiet(demo_home: DemoHome) -> None:
    lines = demo_home.stdout.splitlines()
    assert len(lines) < 60, demo_home.stdout
    assert not [line for line in lines if "DEBUG" in line or "Warning" in line]
    # Steps with durations, and the check that fails on purpose marked as expected.
    assert any(line.startswith("Run ") and "SUCCESS, 18 steps" in line for line in lines)
    assert any(line.split()[:1] == ["episode_dataset_repacked"] and " s " in line for line in lines)
    expected = "missing_assets failed, WARN (expected: one frame file is missing on purpose)"
    gap = f"episodes_with_gap_finalized: {expected}; reference_integrity passed"
    assert gap in [line.strip() for line in lines]
    assert "UNEXPECTED" not in demo_home.stdout
    # Dagster's full event log is kept beside the instance.
    log = demo_home.home / "logs" / "demo-materialize.log"
    assert f"full log: {log}" in demo_home.stdout
    full = log.read_text()
    assert "DEBUG" in full and "STEP_SUCCESS" in full


def test_source_data_generated_once(demo_home: DemoHome) -> None:
    table = pq.read_table(demo_home.home / "refiner_demo" / "episodes" / "v1" / "episodes.parquet")
    expected = expected_counts()
    assert table.num_rows == expected["episodes"]
    frames = [p for cell in table.column("frames").to_pylist() for p in cell]
    assert len(frames) == expected["frames"]
    assert all(read_png_size(p) == (32, 24) for p in frames)
    assert all(read_png_size(p) == (16, 12) for p in table.column("thumbnail").to_pylist())
    assert mdr.datatype.asset_of(table.schema.field("frames")).kind == "image"
    assert demo_home.metadata("episodes")["dagster/row_count"] == expected["episodes"]


def test_every_asset_and_check_materialized(demo_home: DemoHome) -> None:
    with demo_home.instance() as instance:
        for asset in (
            "episodes",
            "labeled_episodes",
            "episode_dataset",
            "episode_dataset_repacked",
            "episodes_with_gap",
            *FINALIZATIONS,
        ):
            assert instance.get_latest_materialization_event(dg.AssetKey(asset)), asset
        outcomes = {}
        for asset in FINALIZATIONS:
            for check in ("missing_assets", "reference_integrity"):
                record = instance.get_latest_asset_check_evaluation_record(
                    dg.AssetCheckKey(dg.AssetKey(asset), check)
                )
                assert record is not None, (asset, check)
                outcomes[(asset, check)] = record.event.asset_check_evaluation.passed
    failed = {key for key, passed in outcomes.items() if not passed}
    # Only the dataset with the deliberately missing frame warns.
    assert failed == {("episodes_with_gap_finalized", "missing_assets")}


def test_labels_and_scores(demo_home: DemoHome) -> None:
    meta = demo_home.metadata("labeled_episodes")
    rows = mdr.read_parquet(meta["dagster/uri"]).materialize()
    assert len(rows) == 24
    assert sum(r.label == "long" for r in rows) == expected_counts()["long_episodes"]
    assert all((r.label == "long") == (r.num_frames > 300) for r in rows)
    assert all(0 < r.score <= 1 for r in rows)
    # The training table holds the label and the score, not the scoring batch's size.
    assert "batch_size" not in rows[0]


def test_packed_and_coalesced_counters(demo_home: DemoHome) -> None:
    expected = expected_counts()
    images = expected["frames"] + expected["thumbnails"]
    image_bytes = expected["frame_bytes"] + expected["thumbnail_bytes"]

    packed = demo_home.metadata("episode_dataset_finalized")
    assert packed["rows_written"] == 24
    assert packed["assets_written"] == images
    assert packed["block_bytes"] == image_bytes
    assert packed["blobs_coalesced"] == 0 and packed["missing_assets"] == 0

    # The packed table's thumbnail references point into these blocks...
    packed_rows = mdr.read_parquet(packed["dagster/uri"]).materialize()
    thumbnail_blocks = {r.thumbnail["path"] for r in packed_rows}
    assert len(thumbnail_blocks) >= 2

    # ...and re-packing copies each of them whole: one coalesced blob per block.
    repacked = demo_home.metadata("episode_dataset_repacked_finalized")
    assert repacked["rows_written"] == 24
    assert repacked["blobs_coalesced"] == len(thumbnail_blocks)
    assert repacked["references_coalesced"] == expected["thumbnails"]
    assert repacked["bytes_coalesced"] == expected["thumbnail_bytes"]
    # Frames are list columns: copied range by range.
    assert repacked["ranges_copied"] == expected["frames"]
    assert repacked["bytes_range_copied"] == expected["frame_bytes"]
    assert repacked["assets_written"] == images

    # What landed reads back byte for byte.
    source = {
        r["episode_id"]: r
        for r in pq.read_table(
            demo_home.home / "refiner_demo" / "episodes" / "v1" / "episodes.parquet"
        ).to_pylist()
    }
    for row in mdr.read_parquet(repacked["dagster/uri"]).materialize():
        original = source[row.episode_id]
        assert row.thumbnail["path"].startswith(repacked["dagster/uri"])
        assert mdr.read_blob(row.thumbnail) == Path(original["thumbnail"]).read_bytes()
        assert [mdr.read_blob(f) for f in row.frames] == [
            Path(p).read_bytes() for p in original["frames"]
        ]


def test_missing_frame_set_to_null(demo_home: DemoHome) -> None:
    expected = expected_counts()
    gap = demo_home.metadata("episodes_with_gap_finalized")
    assert gap["missing_assets"] == 1
    assert gap["cells_nulled"] == 1
    assert gap["rows_dropped"] == 0
    assert gap["rows_written"] == 24
    assert gap["assets_written"] == expected["frames"] + expected["thumbnails"] - 1
    assert gap["refiner/missing_policy"] == "set_null"
    rows = {r.episode_id: r for r in mdr.read_parquet(gap["dagster/uri"]).materialize()}
    frames = rows["episode_005"].frames
    assert frames[-1] is None and all(f is not None for f in frames[:-1])
    assert all(None not in r.frames for k, r in rows.items() if k != "episode_005")


def test_demo_automation_and_fanout_job(
    demo_home: DemoHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    from refiner_dagster.demo.definitions import defs

    assert defs.resolve_sensor_def("demo_drop_sensor").job_name == "demo_refresh"
    assert defs.resolve_schedule_def("demo_refresh_daily").job_name == "demo_refresh"
    # The refresh job selects the demo group, which holds every demo asset.
    groups = {s.key.to_user_string(): s.group_name for s in defs.resolve_all_asset_specs()}
    assert set(groups.values()) == {"refiner_demo"}
    assert {"episodes", *FINALIZATIONS} <= set(groups)

    # The fan-out export job: plan -> 4 write steps -> finalize, a published JSONL dataset.
    monkeypatch.setenv("REFINER_DEMO_DATA_DIR", str(demo_home.home / "refiner_demo"))
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("episodes_export").execute_in_process(instance=instance)
        assert result.success
        writes = [
            e
            for e in result.all_events
            if e.event_type == dg.DagsterEventType.STEP_SUCCESS
            and e.step_key.startswith("episodes_jsonl.episodes_jsonl_write[")
        ]
        assert len(writes) == 4
        storage = rd.DatasetStorage(os.path.join(instance.storage_directory(), "refiner"))
        published = storage.current(["episodes_jsonl"], None)
        assert published is not None and published.format == "jsonl"
        assert published.summary().counters["rows_written"] == 24
        exported = mdr.read_jsonl(published.url).materialize()
    assert sorted(r["episode_id"] for r in exported) == sorted(
        f"episode_{i:03d}" for i in range(24)
    )


SENSOR_PROBE = """
import json
import dagster as dg
from refiner_dagster.demo.definitions import defs, source_pipeline

sensor = defs.resolve_sensor_def("demo_drop_sensor")
first = sensor(dg.build_sensor_context())
second = sensor(dg.build_sensor_context(cursor=first.cursor))
print(json.dumps({
    "job": sensor.job_name,
    "first": [r.run_key for r in first.run_requests],
    "second": [r.run_key for r in second.run_requests],
    "rows": len(source_pipeline().materialize()),
}))
"""


def test_drop_sensor_requests_refresh(demo_home: DemoHome) -> None:
    source = demo_home.home / "refiner_demo" / "episodes" / "v1" / "episodes.parquet"
    dropped = demo_home.home / "refiner_demo" / "drop" / "more_episodes.parquet"
    pq.write_table(pq.read_table(source).slice(0, 2), dropped)
    os.utime(dropped, (1_700_000_000, 1_700_000_000))  # settled: older than min_age_seconds
    try:
        done = subprocess.run(
            [sys.executable, "-c", SENSOR_PROBE],
            cwd=REPO,
            env=demo_home.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        probe = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        dropped.unlink()
    assert probe["job"] == "demo_refresh"
    assert len(probe["first"]) == 1
    assert probe["first"][0].startswith("more_episodes.parquet@s")
    assert probe["first"][0].endswith("-m1700000000000000")
    assert probe["second"] == []
    # A dropped file joins the source table of the next refresh.
    assert probe["rows"] == 24 + 2
