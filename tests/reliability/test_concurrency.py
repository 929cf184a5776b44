"""Concurrent writers: two launches on one output folder (local disk and moto S3), and
two Dagster materializations of one dataset asset through the blob IO manager."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
import traceback

import dagster as dg
import pytest
import s3fs

import refiner_core as mdr
import refiner_dagster as rd
from refiner_core.io import DataFolder
from refiner_core.io.ownership import current_owner
from refiner_dagster.storage import short_run_id
from tests.dagster.conftest import TELEMETRY_OFF, _instance_template, dagster_home, media  # noqa: F401
from tests.s3_fixtures import *  # noqa: F403

ROWS = 40


def _slow(row):
    time.sleep(0.02)
    return {"v": row["i"] * 3}


def _launch_first(url, options, rundir) -> None:
    code = 1
    try:
        pipeline = mdr.from_items([{"i": i} for i in range(ROWS)], items_per_shard=5)
        pipeline.map(_slow).write_parquet(url, storage_options=options).launch_local(
            num_workers=2, rundir=rundir
        )
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


@pytest.fixture(params=["local", "s3"])
def output(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "out"), None
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/out", request.getfixturevalue("s3_storage_options")


@pytest.mark.timeout(240)
def test_a_second_run_on_a_folder_being_written_fails_fast_and_nothing_is_lost(output, tmp_path):
    url, options = output
    ctx = multiprocessing.get_context("fork")
    first = ctx.Process(target=_launch_first, args=(url, options, str(tmp_path / "run1")))
    first.start()
    folder = DataFolder(url, options)
    deadline = time.monotonic() + 60
    owner = None
    while owner is None and time.monotonic() < deadline:
        owner = current_owner(folder)
        time.sleep(0.02)
    assert owner is not None and owner.pid == first.pid

    second = mdr.from_items([{"i": 1000 + i} for i in range(ROWS)], items_per_shard=5)
    started = time.monotonic()
    with pytest.raises(mdr.OutputFolderBusy) as caught:
        second.map(_slow).write_parquet(url, storage_options=options).launch_local(
            num_workers=2, rundir=str(tmp_path / "run2")
        )
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert url.rstrip("/") in message and f"run {owner.run_id}" in message
    assert first.is_alive()  # it failed while the first run was still writing

    first.join(timeout=180)
    assert first.exitcode == 0
    rows = list(mdr.read_parquet(url, storage_options=options).iter_rows())
    assert sorted(r["i"] for r in rows) == list(range(ROWS))
    assert all(r["v"] == r["i"] * 3 for r in rows)
    listed = json.loads(folder.read_bytes("_refiner/summary.json"))["files"]
    assert listed and all(folder.exists(f) for f in listed)
    if options is not None:  # nothing of the refused run reached the bucket
        fs = s3fs.S3FileSystem(**options)
        assert not [k for k in fs.find(url) if "1000" in k]


def _dataset_asset(files):
    items = [{"episode": i, "image": path} for i, (path, _) in enumerate(files)]

    @dg.asset(name="episodes", io_manager_key="refiner", metadata={"refiner/target_bytes": 64})
    def episodes() -> mdr.Pipeline:
        pipeline = mdr.from_items(
            items, items_per_shard=2, dtypes={"image": mdr.datatype.image_path()}
        )
        return pipeline.map(_slow_episode)

    return episodes


def _slow_episode(row):
    time.sleep(0.05)
    return {"label": f"episode-{row['episode']}"}


def _materialize(files, home: str, start, result_file: str) -> None:
    code = 1
    try:
        os.environ["DAGSTER_HOME"] = home
        episodes = _dataset_asset(files)
        with dg.instance_for_test(temp_dir=home, overrides=TELEMETRY_OFF) as instance:
            start.wait(60)
            result = dg.materialize(
                [episodes, rd.build_finalization_asset(episodes)],
                instance=instance,
                resources={"refiner": rd.RefinerBlobIOManager(num_workers=2)},
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
def test_two_materializations_of_one_dataset_asset_both_land_whole(request, tmp_path):
    home = request.getfixturevalue("dagster_home")  # a real instance on SQLite
    files = request.getfixturevalue("media")(8)
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(2)
    result_files = [str(tmp_path / f"result-{k}.json") for k in range(2)]
    runs = [
        ctx.Process(target=_materialize, args=(files, home, start, result_file))
        for result_file in result_files
    ]
    for p in runs:
        p.start()
    for p in runs:
        p.join(timeout=240)
    outcomes = []
    for result_file in result_files:
        with open(result_file) as f:
            outcomes.append(json.load(f))
    run_ids = {run_id for _, run_id, _ in outcomes}
    assert len(run_ids) == 2 and None not in run_ids, outcomes
    # Both runs succeed, or the older one's finalization fails because the newer
    # version was published first (an older version never replaces a newer one).
    assert any(ok for ok, _, _ in outcomes), outcomes
    superseded = [run_id for ok, run_id, _ in outcomes if not ok]
    for ok, _, errors in outcomes:
        if not ok:
            assert len(errors) == 1 and "was superseded" in errors[0], errors

    with dg.instance_for_test(temp_dir=home, overrides=TELEMETRY_OFF) as instance:
        root = os.path.join(instance.storage_directory(), "refiner", "episodes")
        storage = rd.RefinerBlobIOManager().storage(instance)
        current = storage.current(["episodes"], None)
        assert current is not None
        assert current.name in {f"v-{short_run_id(r)}" for r in run_ids - set(superseded)}
        rows = list(mdr.read_parquet(current.url).iter_rows())
        assert sorted(r["episode"] for r in rows) == list(range(8))
        for row in rows:
            assert mdr.read_blob(row["image"]) == files[row["episode"]][1]
            assert row["label"] == f"episode-{row['episode']}"
        for name in os.listdir(root):  # every version left behind reads whole too
            version = os.path.join(root, name)
            if name.startswith("v-") and os.path.exists(
                os.path.join(version, "_refiner", "summary.json")
            ):
                again = list(mdr.read_parquet(version).iter_rows())
                assert sorted(r["episode"] for r in again) == list(range(8))


def test_an_older_published_version_stays_while_its_run_is_live(tmp_path):
    # Two runs finalize one asset: run a publishes its (older) version and is still
    # reading it for its metadata when run b publishes the newer one.
    storage = rd.DatasetStorage(str(tmp_path))
    live = {"run-a": True, "run-b": True}
    keep_one = {"retention": {"keep_versions": 1}}
    older = storage.begin(["episodes"], None, "v-older", {"dagster_run_id": "run-a", **keep_one})
    older.folder.write_bytes("v-older/part.parquet", b"older")
    time.sleep(0.01)
    newer = storage.begin(["episodes"], None, "v-newer", {"dagster_run_id": "run-b", **keep_one})
    storage.publish(older, is_live=live.__getitem__)
    published = storage.publish(newer, is_live=live.__getitem__)
    assert storage.current(["episodes"], None).name == "v-newer"
    assert (tmp_path / "episodes" / "v-older" / "part.parquet").read_bytes() == b"older"

    live["run-a"] = False  # the next publication's cleanup removes it
    assert storage.cleanup(published, is_live=live.__getitem__) == ["v-older"]
    assert not (tmp_path / "episodes" / "v-older").exists()


def test_a_slower_finalization_never_moves_readers_back(tmp_path):
    # Run a reduced and audited its older version, then run b published a newer one
    # before a reached its publish: a's publish is refused and readers keep b's version.
    storage = rd.DatasetStorage(str(tmp_path))
    older = storage.begin(["episodes"], None, "v-older", {"dagster_run_id": "run-a"})
    time.sleep(0.01)
    newer = storage.begin(["episodes"], None, "v-newer", {"dagster_run_id": "run-b"})
    storage.publish(newer)
    with pytest.raises(rd.SupersededError, match="v-older.*superseded.*v-newer"):
        storage.publish(older)
    assert storage.current(["episodes"], None).name == "v-newer"
    assert storage.version(["episodes"], None, "v-older").state != "published"
