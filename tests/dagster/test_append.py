"""Audited append: a version made of the published version's files plus new shards,
on a real Dagster instance (the IO-manager path, the fan-out, and garbage collection)."""

from __future__ import annotations

import json
import os

import dagster as dg
import pytest

import refiner_core as mdr
import refiner_dagster as rd

from .test_io_manager import current_pointer, output_metadata, partition_root


def _rows(files: list[tuple[str, bytes]], start: int, stop: int) -> list[dict]:
    return [{"i": i, "image": files[i][0]} for i in range(start, stop)]


def _append_asset(batches: list[list[dict]], *, name: str = "episodes", shards: int = 4):
    @dg.asset(name=name, io_manager_key="refiner", metadata={"refiner/mode": "append"})
    def episodes() -> mdr.Pipeline:
        items = batches.pop(0)
        return mdr.from_items(
            items,
            items_per_shard=max(1, len(items) // shards),
            dtypes={"image": mdr.datatype.image_path()},
        )

    return episodes


def _files_with_stat(root: str, version: str) -> dict[str, tuple[int, int, int]]:
    found = {}
    for folder, _, names in os.walk(os.path.join(root, version)):
        for n in names:
            path = os.path.join(folder, n)
            st = os.stat(path)
            found[os.path.relpath(path, root)] = (st.st_ino, st.st_mtime_ns, st.st_size)
    return found


def _materialize(instance, assets, resources) -> dg.ExecuteInProcessResult:
    result = dg.materialize(assets, instance=instance, resources=resources)
    assert result.success
    return result


def test_append_shares_the_parent_files_and_reads_every_row(dagster_instance, media):
    files = media(1100)
    batches = [_rows(files, 0, 1000), _rows(files, 1000, 1100)]
    episodes = _append_asset(batches)
    finalized = rd.build_finalization_asset(episodes)
    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=1, target_bytes=64 * 1024)}
    _materialize(dagster_instance, [episodes, finalized], resources)
    root = partition_root(dagster_instance, "episodes")
    parent = current_pointer(root)["version"]
    before = _files_with_stat(root, parent)
    assert any("/assets/" in p for p in before)

    result = _materialize(dagster_instance, [episodes, finalized], resources)
    child = current_pointer(root)["version"]
    assert child != parent
    # not one byte of the parent was copied, rewritten or re-linked
    assert _files_with_stat(root, parent) == before
    own = _files_with_stat(root, child)

    rows = list(mdr.read_parquet(root).iter_rows())
    assert sorted(r.i for r in rows) == list(range(1100))
    by_source = dict(files)
    for r in rows:
        assert mdr.read_blob(r.image) == by_source[files[r.i][0]]
    new_blocks = [p for p in own if p.endswith(".bin")]
    written = sum(os.path.getsize(os.path.join(root, p)) for p in new_blocks)
    assert written == sum(len(data) for _, data in files[1000:])  # only the new media

    # the parent still reads as it was, by name
    assert len(list(mdr.read_parquet(root, version=parent).iter_rows())) == 1000
    metadata = output_metadata(result, "episodes_finalized")
    assert metadata["dagster/row_count"] == 1100
    assert metadata["refiner/rows_inherited"] == 1000
    assert metadata["refiner/rows_appended"] == 100
    assert metadata["refiner/appended_to"] == parent
    with open(os.path.join(root, "_versions", f"{child}.json")) as f:
        record = json.load(f)
    assert record["append_parent"] == parent
    assert set(record["inherits"]) == set(before) - {
        p for p in before if p.startswith(f"{parent}/_refiner/")
    }
    assert "inherits" not in current_pointer(root)  # the list stays in the record


def test_a_downstream_asset_loads_the_appended_rows_and_the_parent_by_version(
    dagster_instance, media
):
    files = media(30)
    batches = [_rows(files, 0, 20), _rows(files, 20, 30)]
    episodes = _append_asset(batches, shards=2)
    finalized = rd.build_finalization_asset(episodes)
    seen: dict[str, int] = {}
    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=1)}
    _materialize(dagster_instance, [episodes, finalized], resources)
    root = partition_root(dagster_instance, "episodes")
    parent = current_pointer(root)["version"]
    _materialize(dagster_instance, [episodes, finalized], resources)

    @dg.asset(ins={"table": dg.AssetIn(key="episodes", metadata={"refiner/version": parent})})
    def parent_rows(table) -> None:
        seen["parent"] = len(list(table.iter_rows()))

    @dg.asset(ins={"table": dg.AssetIn(key="episodes")})
    def latest_rows(table) -> None:
        seen["latest"] = len(list(table.iter_rows()))

    dg.materialize(
        [episodes, latest_rows, parent_rows],
        instance=dagster_instance,
        resources=resources,
        selection=[latest_rows, parent_rows],
    )
    assert seen == {"latest": 30, "parent": 20}


def test_gc_deletes_only_files_no_retained_version_lists(dagster_instance, media):
    files = media(60)
    batches = [_rows(files, 0, 40), _rows(files, 40, 50), _rows(files, 50, 60)]
    episodes = _append_asset(batches, shards=2)
    finalized = rd.build_finalization_asset(episodes)
    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=1, keep_versions=1)}
    root = partition_root(dagster_instance, "episodes")
    names, trees = [], []
    for _ in range(3):
        _materialize(dagster_instance, [episodes, finalized], resources)
        names.append(current_pointer(root)["version"])
        trees.append(_files_with_stat(root, names[-1]))
    v1, v2, v3 = names
    with open(os.path.join(root, "_versions", f"{v3}.json")) as f:
        listed = set(json.load(f)["inherits"])
    # only v3 is retained: of v1 and v2 exactly the files it lists stay, untouched
    for tree_ in trees[:2]:
        for path, stat in tree_.items():
            if path in listed:
                assert _files_with_stat(root, path.split("/")[0])[path] == stat
            else:
                assert not os.path.exists(os.path.join(root, path)), path
    assert not os.path.exists(os.path.join(root, "_versions", f"{v1}.json"))
    assert not os.path.exists(os.path.join(root, "_versions", f"{v2}.json"))
    rows = list(mdr.read_parquet(root).iter_rows())
    assert sorted(r.i for r in rows) == list(range(60))
    by_source = dict(files)
    assert all(mdr.read_blob(r.image) == by_source[files[r.i][0]] for r in rows)

    # once no version lists them any more, the old folders go entirely
    batches.append([{"i": 99, "image": files[0][0]}])

    @dg.asset(name="episodes", io_manager_key="refiner")
    def rewritten() -> mdr.Pipeline:
        return mdr.from_items(batches.pop(0), dtypes={"image": mdr.datatype.image_path()})

    _materialize(dagster_instance, [rewritten, rd.build_finalization_asset(rewritten)], resources)
    left = sorted(n for n in os.listdir(root) if n.startswith("v-"))
    assert left == [current_pointer(root)["version"]]


def test_history_marks_appends_and_counts_their_rows(dagster_instance, media, capsys):
    from refiner_core.cli import main as refiner_cli

    files = media(12)
    batches = [_rows(files, 0, 8), _rows(files, 8, 12)]
    episodes = _append_asset(batches, shards=2)
    finalized = rd.build_finalization_asset(episodes)
    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=1)}
    for _ in range(2):
        _materialize(dagster_instance, [episodes, finalized], resources)
    root = partition_root(dagster_instance, "episodes")
    infos = mdr.io.dataset_versions(mdr.DataFolder(root))
    assert [v.rows for v in infos] == [8, 12]
    assert infos[1].appended_to == infos[0].name and infos[0].appended_to is None
    with pytest.raises(SystemExit) as exit_:
        refiner_cli(["history", root])
    assert exit_.value.code in (0, None)
    assert f"{infos[0].name} (appended)" in capsys.readouterr().out
    # verify and inspect read the shared tables too
    for command in (["verify", root], ["inspect", root]):
        with pytest.raises(SystemExit) as exit_:
            refiner_cli(command)
        assert exit_.value.code in (0, None)
    out = capsys.readouterr().out
    assert "OK: 12 rows, 12 blob references" in out
    assert f"12 (8 shared with {infos[0].name})" in out


def test_an_append_with_other_columns_is_refused_and_not_published(dagster_instance, media):
    files = media(8)
    batches = [_rows(files, 0, 6), [{"i": "seven", "image": files[6][0]}]]
    episodes = _append_asset(batches, shards=2)
    finalized = rd.build_finalization_asset(episodes)
    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=1)}
    _materialize(dagster_instance, [episodes, finalized], resources)
    root = partition_root(dagster_instance, "episodes")
    parent = current_pointer(root)["version"]
    result = dg.materialize(
        [episodes, finalized], instance=dagster_instance, resources=resources, raise_on_error=False
    )
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    error = failure.step_failure_data.error
    message = error.message + "".join(c.message for c in _causes(error))
    assert "column 'i' is string in the new rows but int64" in message and parent in message
    assert current_pointer(root)["version"] == parent
    assert sorted(r.i for r in mdr.read_parquet(root).iter_rows()) == list(range(6))


def test_append_is_refused_for_formats_that_cannot_share_files():
    metadata = {
        "refiner/mode": "append",
        "refiner/format": "lerobot",
        "refiner/lerobot_fps": 10,
    }

    @dg.asset(io_manager_key="refiner", metadata=metadata)
    def table() -> mdr.Pipeline:
        return mdr.from_items([{"x": 1}])

    with pytest.raises(ValueError, match="refiner/mode='append' works for parquet, jsonl, lance"):
        rd.build_finalization_asset(table)
    with pytest.raises(ValueError, match="refiner/mode='sometimes' is not one of"):
        rd.build_dataset_asset(lambda context: mdr.from_items([]), name="t", mode="sometimes")


def test_a_lance_dataset_appends_through_a_shallow_clone(dagster_instance, media):
    files = media(60)
    batches = [_rows(files, 0, 50), _rows(files, 50, 60)]

    @dg.asset(
        name="episodes",
        io_manager_key="refiner",
        metadata={"refiner/mode": "append", "refiner/format": "lance"},
    )
    def episodes() -> mdr.Pipeline:
        return mdr.from_items(
            batches.pop(0), items_per_shard=25, dtypes={"image": mdr.datatype.image_path()}
        )

    finalized = rd.build_finalization_asset(episodes)
    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=1, keep_versions=1)}
    _materialize(dagster_instance, [episodes, finalized], resources)
    root = partition_root(dagster_instance, "episodes")
    parent = current_pointer(root)["version"]
    before = _files_with_stat(root, parent)
    result = _materialize(dagster_instance, [episodes, finalized], resources)
    child = current_pointer(root)["version"]
    with open(os.path.join(root, "_versions", f"{child}.json")) as f:
        listed = set(json.load(f)["inherits"])
    # keep_versions=1: the parent's record is gone, and of its files exactly what the
    # clone references stays, untouched
    assert not os.path.exists(os.path.join(root, "_versions", f"{parent}.json"))
    assert listed and all(p.startswith(f"{parent}/") for p in listed)
    for path, stat in before.items():
        if path in listed:
            assert os.stat(os.path.join(root, path)).st_ino == stat[0]
        else:
            assert not os.path.exists(os.path.join(root, path)), path
    rows = list(mdr.read_lance(root).iter_rows())
    assert sorted(r.i for r in rows) == list(range(60))
    by_source = dict(files)
    assert all(mdr.read_blob(r.image) == by_source[files[r.i][0]] for r in rows)
    assert output_metadata(result, "episodes_finalized")["dagster/row_count"] == 60


def test_content_dedupe_reaches_into_the_parent(dagster_instance, media):
    files = media(40)
    again = [{"i": 40 + k, "image": files[k][0]} for k in range(10)]  # the same bytes again
    batches = [_rows(files, 0, 30), again + _rows(files, 30, 40)]
    episodes = _append_asset(batches, shards=2)
    finalized = rd.build_finalization_asset(episodes)
    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=1, dedupe="content")}
    _materialize(dagster_instance, [episodes, finalized], resources)
    root = partition_root(dagster_instance, "episodes")
    parent = current_pointer(root)["version"]
    _materialize(dagster_instance, [episodes, finalized], resources)
    child = current_pointer(root)["version"]
    own_blocks = [p for p in _files_with_stat(root, child) if p.endswith(".bin")]
    stored = sum(os.path.getsize(os.path.join(root, p)) for p in own_blocks)
    assert stored == sum(len(data) for _, data in files[30:40])  # the repeats are not stored
    rows = {r.i: r for r in mdr.read_parquet(root).iter_rows()}
    assert len(rows) == 50
    for k in range(10):
        assert f"/{parent}/" in rows[40 + k].image["path"]
        assert mdr.read_blob(rows[40 + k].image) == files[k][1]


def test_the_fanout_asset_appends(dagster_instance, media):
    files = media(40)
    batches = [_rows(files, 0, 30), _rows(files, 30, 40)]
    calls: list[str] = []

    def frames(context) -> mdr.Pipeline:
        # every step rebuilds the pipeline: the same batch within one run
        return mdr.from_items(
            batches[_run_index(context, calls)],
            items_per_shard=5,
            dtypes={"image": mdr.datatype.image_path()},
        )

    asset = rd.build_dataset_asset(frames, name="frames", mode="append", max_tasks=2)
    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=1)}
    for _ in range(2):
        _materialize(dagster_instance, [asset], resources)
    root = partition_root(dagster_instance, "frames")
    rows = list(mdr.read_parquet(root).iter_rows())
    assert sorted(r.i for r in rows) == list(range(40))
    by_source = dict(files)
    assert all(mdr.read_blob(r.image) == by_source[files[r.i][0]] for r in rows)


def _run_index(context, calls: list[str]) -> int:
    run_id = context.run_id
    if run_id not in calls:
        calls.append(run_id)
    return calls.index(run_id)


def _causes(error):
    while error.cause is not None:
        error = error.cause
        yield error


def test_append_on_s3_writes_nothing_under_the_parent(dagster_instance, media, s3_bucket, s3_proxy):
    from tests.dagster.fanout_defs import S3_ENDPOINT_ENV, s3_resource

    os.environ[S3_ENDPOINT_ENV] = s3_proxy.endpoint_url
    try:
        refiner = rd.RefinerBlobIOManager(
            base_url=f"s3://{s3_bucket}/data", num_workers=1, s3=s3_resource()
        )
    finally:
        del os.environ[S3_ENDPOINT_ENV]
    files = media(110)
    batches = [_rows(files, 0, 100), _rows(files, 100, 110)]
    episodes = _append_asset(batches)
    finalized = rd.build_finalization_asset(episodes)
    resources = {"refiner": refiner}
    _materialize(dagster_instance, [episodes, finalized], resources)
    storage = refiner.storage()
    parent = storage.current(["episodes"], None)
    s3_proxy.clear()
    _materialize(dagster_instance, [episodes, finalized], resources)
    child = storage.current(["episodes"], None)
    assert child.name != parent.name

    writes = {
        "PutObject",
        "UploadPart",
        "UploadPartCopy",
        "CopyObject",
        "CreateMultipartUpload",
        "CompleteMultipartUpload",
        "DeleteObject",
        "DeleteObjects",
    }
    touched = [
        (r.kind, r.path)
        for r in s3_proxy.records()
        if r.kind in writes and f"/{parent.name}/" in r.path
    ]
    assert touched == []
    copies = [r for r in s3_proxy.records() if r.copy_source]
    assert copies == []
    # the only media bytes sent are the ten new files: nothing old was copied anywhere
    block_bytes = sum(
        r.request_bytes
        for r in s3_proxy.records()
        if r.kind in ("PutObject", "UploadPart") and r.path.endswith(".bin")
    )
    assert block_bytes == sum(len(data) for _, data in files[100:])
    options = storage.storage_options
    rows = list(
        mdr.read_parquet(
            storage.partition_folder(["episodes"], None).url, storage_options=options
        ).iter_rows()
    )
    assert sorted(r.i for r in rows) == list(range(110))
    by_source = dict(files)
    for r in rows:
        assert mdr.read_blob(r.image, storage_options=options) == by_source[files[r.i][0]]


def test_the_audit_samples_what_an_append_shares(dagster_instance, media):
    files = media(24)
    batches = [_rows(files, 0, 20), _rows(files, 20, 24)]
    episodes = _append_asset(batches, shards=2)
    finalized = rd.build_finalization_asset(episodes)
    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=1)}
    _materialize(dagster_instance, [episodes, finalized], resources)
    root = partition_root(dagster_instance, "episodes")
    parent = current_pointer(root)["version"]
    blocks = sorted(p for p in _files_with_stat(root, parent) if p.endswith(".bin"))
    with open(os.path.join(root, blocks[0]), "r+b") as f:
        f.truncate(5)  # damaged after it was published: the append's audit must see it

    result = dg.materialize(
        [episodes, finalized], instance=dagster_instance, resources=resources, raise_on_error=False
    )
    assert not result.success
    [check] = [
        c for c in result.get_asset_check_evaluations() if c.check_name == "reference_integrity"
    ]
    assert not check.passed
    assert check.metadata["inherited_references_checked"].value == 20
    shown = check.metadata["first_failures"].value
    assert f"inherited table {parent}/" in shown and blocks[0] in shown
    assert current_pointer(root)["version"] == parent


def test_rollback_to_an_append_keeps_what_it_shares(dagster_instance, media, capsys):
    from refiner_core.cli import main as refiner_cli

    files = media(30)
    batches = [_rows(files, 0, 10), _rows(files, 10, 20), _rows(files, 20, 30)]
    episodes = _append_asset(batches, shards=2)
    finalized = rd.build_finalization_asset(episodes)
    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=1, keep_versions=2)}
    root = partition_root(dagster_instance, "episodes")
    names = []
    for _ in range(3):
        _materialize(dagster_instance, [episodes, finalized], resources)
        names.append(current_pointer(root)["version"])
    # the first version's record is gone (beyond keep_versions=2), its shared files are not
    assert not os.path.exists(os.path.join(root, "_versions", f"{names[0]}.json"))
    assert os.path.isdir(os.path.join(root, names[0]))
    with pytest.raises(SystemExit) as exit_:
        refiner_cli(["rollback", root, "--to", names[1], "--reason", "test"])
    assert exit_.value.code in (0, None)
    rows = list(mdr.read_parquet(root).iter_rows())
    assert sorted(r.i for r in rows) == list(range(20))
    by_source = dict(files)
    assert all(mdr.read_blob(r.image) == by_source[files[r.i][0]] for r in rows)


@pytest.mark.parametrize("fmt", ["jsonl"])
def test_jsonl_datasets_append_too(dagster_instance, media, fmt):
    files = media(12)
    batches = [_rows(files, 0, 8), _rows(files, 8, 12)]

    @dg.asset(
        name="episodes",
        io_manager_key="refiner",
        metadata={"refiner/mode": "append", "refiner/format": fmt},
    )
    def episodes() -> mdr.Pipeline:
        return mdr.from_items(
            batches.pop(0), items_per_shard=4, dtypes={"image": mdr.datatype.image_path()}
        )

    finalized = rd.build_finalization_asset(episodes)
    resources = {"refiner": rd.RefinerFileIOManager(num_workers=1)}
    for _ in range(2):
        _materialize(dagster_instance, [episodes, finalized], resources)
    root = partition_root(dagster_instance, "episodes")
    seen = {}

    @dg.asset(ins={"table": dg.AssetIn(key="episodes")})
    def downstream(table) -> None:
        seen["rows"] = sorted((r.i, _read(r.image)) for r in table.iter_rows())

    dg.materialize(
        [episodes, downstream],
        instance=dagster_instance,
        resources=resources,
        selection=[downstream],
    )
    assert seen["rows"] == [(i, files[i][1]) for i in range(12)]
    assert len(list(mdr.read_jsonl(root).iter_rows())) == 12


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.parametrize("fanout", [None, {"max_tasks": 2}], ids=["io_manager", "fanout"])
def test_the_component_mode_field_sets_append(dagster_instance, tmp_path, fanout):
    declared = {
        "key": "frames",
        "pipeline": "refiner_dagster.component:example_pipeline",
        "storage": {"base_url": str(tmp_path)},
        "mode": "append",
        **({"fanout": fanout} if fanout else {}),
    }
    defs = rd.RefinerDatasetComponent.model_validate(declared).dataset_defs()
    asset = defs.resolve_assets_def("frames")
    assert asset.metadata_by_key[asset.key]["refiner/mode"] == "append"
    with pytest.raises(ValueError, match="mode"):
        rd.RefinerDatasetComponent.model_validate({**declared, "mode": "merge"})


def test_a_deleted_version_whose_files_are_shared_is_not_readable_by_name(dagster_instance, media):
    from refiner_core.io import UnknownVersion

    files = media(20)
    batches = [_rows(files, 0, 10), _rows(files, 10, 15), _rows(files, 15, 20)]
    episodes = _append_asset(batches, shards=2)
    finalized = rd.build_finalization_asset(episodes)
    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=1, keep_versions=1)}
    root = partition_root(dagster_instance, "episodes")
    names = []
    for _ in range(3):
        _materialize(dagster_instance, [episodes, finalized], resources)
        names.append(current_pointer(root)["version"])
    assert os.path.isdir(os.path.join(root, names[0]))  # its shared files are still there
    with pytest.raises(UnknownVersion, match=f"no version '{names[0]}' on disk"):
        mdr.read_parquet(root, version=names[0]).plan()
