"""The demo code location: a small robotics dataset refined end to end, offline.

Load it with ``dagster dev -w workspace.yaml`` or materialize everything with
``dagster asset materialize -m refiner_dagster.demo.definitions --select '*'``
(``scripts/demo.sh`` does that and prints where everything landed).

Assets (group ``refiner_demo``)::

    episodes                      source table: 24 episodes, 24 thumbnails + 60 frames (PNG),
                                  generated on first run
      -> labeled_episodes         map_async "long"/"short" label + batch_map_async score;
                                  images copied one file each (RefinerFileIOManager)
        -> episode_dataset        images packed into ~4 KiB blocks (RefinerBlobIOManager)
          -> episode_dataset_finalized          reducer + publish, counters as metadata
            -> episode_dataset_repacked         re-written from the blob references: every
                                                thumbnail block is covered, so it is copied whole
              -> episode_dataset_repacked_finalized   (blobs_coalesced > 0)
      -> episodes_with_gap        one frame points at a file that does not exist,
                                  missing_policy "set_null"
        -> episodes_with_gap_finalized         (missing_assets = cells_nulled = 1)
    robot_episodes                4 synthetic episodes x 2 s of one 64x48 H.264 camera as a
                                  LeRobot dataset (refiner/format: lerobot); episode 3's
                                  camera clock drifts, so it is filtered out upstream
      -> robot_episodes_finalized             stats, indices, meta/, video_integrity, publish

Every finalization asset carries the ``missing_assets`` and ``reference_integrity``
checks; the LeRobot one also the blocking ``video_integrity``. ``episode_thumbnails`` (and its finalization) is declared in YAML
instead, as a ``RefinerDatasetComponent`` (``defs/episode_thumbnails/defs.yaml``). ``demo_refresh`` is a job over all of them; ``demo_refresh_daily`` runs it
at 04:00 UTC and ``demo_drop_sensor`` runs it for every new or changed Parquet file in the
drop folder (``<demo data dir>/drop``; the files join the source table). The
``episodes_export`` job materializes ``episodes_jsonl``, a fan-out dataset asset
(``build_dataset_asset``: plan -> write x 4 -> finalize) writing the labeled episodes
as JSONL, images copied one file each.

Where data lands: generated inputs under :func:`~refiner_dagster.demo.data.demo_data_dir`
(``$DAGSTER_HOME/refiner_demo`` by default), dataset versions under
``$DAGSTER_HOME/storage/refiner/<asset>/``.
"""

import asyncio
from pathlib import Path

import dagster as dg

import refiner_core as mdr
from refiner_dagster import (
    RefinerBlobIOManager,
    RefinerFileIOManager,
    build_dataset_asset,
    build_dataset_checks,
    build_finalization_asset,
)
from refiner_dagster.demo import defs as component_defs_folder
from refiner_dagster.demo.data import (
    LONG_EPISODE_FRAMES,
    demo_data_dir,
    ensure_demo_data,
    source_dtypes,
)
from refiner_dagster.demo.robotics import CAMERA, FPS, ensure_robot_episodes, keeps_time
from refiner_dagster.schedules import build_refresh_schedule
from refiner_dagster.sensors import build_source_sensor

GROUP = "refiner_demo"
GAP_EPISODE = "episode_005"
GAP_FRAME = "frame_missing.png"
PACKED_TARGET_BYTES = 4 * 1024
DRIFTING_EPISODE = 3


# pipeline pieces (module level, so worker processes can import them) -----------------
def source_pipeline(num_shards: int | None = None) -> mdr.Pipeline:
    """The episodes table plus any Parquet file dropped into the drop folder."""
    demo = ensure_demo_data()
    drops = sorted(
        str(p) for p in demo.drop.rglob("*.parquet") if not p.name.startswith((".", "_"))
    )
    return mdr.read_parquet(
        [str(demo.table), *drops], dtypes=source_dtypes(), num_shards=num_shards
    )


async def label_episode(row: mdr.Row) -> dict:
    """``"long"`` above 300 frames, else ``"short"`` (an async call per row)."""
    await asyncio.sleep(0)
    return {"label": "long" if row.num_frames > LONG_EPISODE_FRAMES else "short"}


async def score_batch(rows: list[mdr.Row]) -> list[mdr.Row]:
    """A stand-in batch model: one score per row in [0, 1], computed per batch."""
    await asyncio.sleep(0)
    longest = max(row.num_frames for row in rows)
    return [row.update(score=round(row.num_frames / longest, 4)) for row in rows]


def with_gap(row: mdr.Row) -> mdr.Row:
    """Point the last frame of one episode at a file that does not exist."""
    if row.episode_id != GAP_EPISODE:
        return row
    frames = list(row.frames)
    frames[-1] = str(Path(frames[-1]).with_name(GAP_FRAME))
    return row.update(frames=frames)


def export_pipeline(context: dg.OpExecutionContext) -> mdr.Pipeline:
    """The labeled episodes in 4 shards, one per write step of ``episodes_jsonl``."""
    demo = ensure_demo_data()
    pipeline = mdr.read_parquet(str(demo.table), dtypes=source_dtypes(), num_shards=4)
    return pipeline.map_async(label_episode)


# assets ----------------------------------------------------------------------------
@dg.asset(group_name=GROUP, kinds={"parquet"})
def episodes() -> dg.MaterializeResult:
    """The source episodes table (generated with real PNG frames on first run)."""
    demo = ensure_demo_data()
    rows = source_pipeline().materialize()
    return dg.MaterializeResult(
        metadata={
            "dagster/uri": dg.MetadataValue.path(str(demo.table)),
            "dagster/row_count": dg.MetadataValue.int(len(rows)),
            "frames": dg.MetadataValue.int(sum(len(r.frames) for r in rows)),
            "thumbnails": dg.MetadataValue.int(sum(r.thumbnail is not None for r in rows)),
            "drop_folder": dg.MetadataValue.path(str(demo.drop)),
            "dagster/column_schema": dg.TableSchema(
                columns=[
                    dg.TableColumn("episode_id", "string"),
                    dg.TableColumn("num_frames", "int64"),
                    dg.TableColumn("task", "string"),
                    dg.TableColumn("thumbnail", "image path"),
                    dg.TableColumn("frames", "list<image path>"),
                ]
            ),
        }
    )


@dg.asset(
    group_name=GROUP,
    deps=[episodes],
    io_manager_key="refiner_files",
    metadata={"refiner/finalize_inline": True},
    kinds={"refiner", "parquet"},
)
def labeled_episodes() -> mdr.Pipeline:
    """Episodes labeled long/short (``map_async``) and scored in batches (``batch_map_async``)."""
    # one shard: the 24 episodes score in three full batches of eight, whatever the
    # number of workers (rows with media are otherwise cut into 4 shards per worker)
    return (
        source_pipeline(num_shards=1)
        .map_async(label_episode, max_in_flight=8)
        .batch_map_async(score_batch, batch_size=8, max_in_flight=2)
    )


@dg.asset(
    group_name=GROUP,
    io_manager_key="refiner_blobs",
    metadata={"refiner/target_bytes": PACKED_TARGET_BYTES},
    kinds={"refiner", "parquet"},
)
def episode_dataset(labeled_episodes: mdr.Pipeline) -> mdr.Pipeline:
    """The training table: images packed into ~4 KiB blocks, cells are blob references."""
    return labeled_episodes


episode_dataset_finalized = build_finalization_asset(episode_dataset)


@dg.asset(group_name=GROUP, io_manager_key="refiner_blobs", kinds={"refiner", "parquet"})
def episode_dataset_repacked(episode_dataset_finalized: mdr.Pipeline) -> mdr.Pipeline:
    """The packed dataset written again from its blob references.

    The scalar ``thumbnail`` references cover every thumbnail block completely, so each
    block is copied once and the offsets translated (coalesced); the ``frames`` lists
    are copied range by range.
    """
    return episode_dataset_finalized


episode_dataset_repacked_finalized = build_finalization_asset(episode_dataset_repacked)


@dg.asset(
    group_name=GROUP,
    deps=[episodes],
    io_manager_key="refiner_blobs",
    metadata={"refiner/missing_policy": "set_null"},
    kinds={"refiner", "parquet"},
)
def episodes_with_gap() -> mdr.Pipeline:
    """Episodes with one missing frame file, packed with ``missing_policy="set_null"``."""
    return source_pipeline().map(with_gap)


episodes_with_gap_finalized = build_finalization_asset(episodes_with_gap)

episodes_jsonl = build_dataset_asset(
    export_pipeline,
    name="episodes_jsonl",
    io_manager_key="refiner_files",
    group_name=GROUP,
    metadata={"refiner/format": "jsonl"},
    max_tasks=4,
)


@dg.asset(
    group_name=GROUP,
    io_manager_key="refiner_blobs",
    metadata={
        "refiner/format": "lerobot",
        "refiner/lerobot_fps": FPS,
        "refiner/lerobot_robot_type": "demo_arm",
    },
    kinds={"refiner", "lerobot"},
)
def robot_episodes(context: dg.AssetExecutionContext) -> mdr.Pipeline:
    """Synthetic robot episodes with real H.264 video, written as a LeRobot v3.0 dataset.

    One episode's camera clock drifts on purpose; it is found from its packet timestamps
    and filtered out here, upstream, so the blocking ``video_integrity`` check passes.
    """
    rows = ensure_robot_episodes(demo_data_dir() / "robot_videos", drifting=DRIFTING_EPISODE)
    dropped = [i for i, row in enumerate(rows) if not keeps_time(row)]
    kept = [row for i, row in enumerate(rows) if i not in dropped]
    context.log.info(f"filtered out drifting episode(s) {dropped} of {len(rows)} upstream")
    context.add_output_metadata(
        {
            "episodes_generated": dg.MetadataValue.int(len(rows)),
            "drifting_filtered_out": dg.MetadataValue.int(len(dropped)),
        }
    )
    return mdr.from_items(kept, dtypes={CAMERA: mdr.datatype.video_clip()}, items_per_shard=2)


robot_episodes_finalized = build_finalization_asset(robot_episodes)

FINALIZATION_ASSETS = [
    episode_dataset_finalized,
    episode_dataset_repacked_finalized,
    episodes_with_gap_finalized,
    robot_episodes_finalized,
]
DEMO_ASSETS = [
    episodes,
    labeled_episodes,
    episode_dataset,
    episode_dataset_repacked,
    episodes_with_gap,
    episodes_jsonl,
    robot_episodes,
    *FINALIZATION_ASSETS,
]
DEMO_CHECKS = [check for final in FINALIZATION_ASSETS for check in build_dataset_checks(final)]

# automation --------------------------------------------------------------------------
demo_refresh = dg.define_asset_job(
    "demo_refresh",
    selection=dg.AssetSelection.groups(GROUP),
    description="Regenerates every demo dataset, its finalization and checks.",
)
demo_refresh_schedule = build_refresh_schedule(
    demo_refresh,
    "0 4 * * *",
    "UTC",
    name="demo_refresh_daily",
    description=(
        "Refreshes every demo dataset at 04:00 UTC. Starts stopped: turn it on with the "
        "toggle on this page (the daemon that `dagster dev` starts then runs it), or with "
        "`dagster schedule start demo_refresh_daily -w workspace.yaml`."
    ),
)
demo_drop_sensor = build_source_sensor(
    name="demo_drop_sensor",
    url=str(demo_data_dir() / "drop"),
    pattern="*.parquet",
    job=demo_refresh,
    max_files_per_tick=10,
    min_age_seconds=2,
    description=(
        "Reprocesses the demo datasets when an episodes Parquet file (same columns as the "
        "source table) appears or changes in the drop folder. Starts stopped: turn it on with "
        "the toggle on this page (the daemon that `dagster dev` starts then polls the folder), "
        "or with `dagster sensor start demo_drop_sensor -w workspace.yaml`."
    ),
)
episodes_export = dg.define_asset_job(
    "episodes_export",
    selection=[episodes_jsonl],
    description="Fan-out write: plan the export's shards, write them in parallel, finalize.",
)


def _component_defs() -> dg.Definitions:
    """The datasets declared in YAML under ``defs/`` (``RefinerDatasetComponent``).

    ``dg check defs`` and ``dg dev`` load them through Dagster's component tree. The
    code location builds them from their ``defs.yaml`` directly: the tree also loads
    every component library installed (dagster-aws's among them, seconds of imports)
    to describe them in the UI, which the demo does not need.
    """
    import yaml

    from refiner_dagster import RefinerDatasetComponent

    loaded = []
    for declared in sorted(Path(component_defs_folder.__file__).parent.glob("*/defs.yaml")):
        spec = yaml.safe_load(declared.read_text())
        if spec.get("type") != "refiner_dagster.RefinerDatasetComponent":
            raise ValueError(f"{declared}: the demo only declares RefinerDatasetComponent datasets")
        component = RefinerDatasetComponent.model_validate(spec.get("attributes") or {})
        loaded.append(component.dataset_defs())
    return dg.Definitions.merge(*loaded)


defs = dg.Definitions.merge(
    _component_defs(),
    dg.Definitions(
        assets=DEMO_ASSETS,
        asset_checks=DEMO_CHECKS,
        jobs=[demo_refresh, episodes_export],
        schedules=[demo_refresh_schedule],
        sensors=[demo_drop_sensor],
        resources={
            "refiner_blobs": RefinerBlobIOManager(),
            "refiner_files": RefinerFileIOManager(),
        },
    ),
)
