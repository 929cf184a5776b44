"""RefinerBlobIOManager / RefinerFileIOManager on a real Dagster instance (local disk and S3)."""

from __future__ import annotations

import json
import os

import dagster as dg
import pytest
from dagster_aws.s3 import S3Resource

import refiner_core as mdr
import refiner_dagster as rd
from refiner_dagster.storage import CURRENT_POINTER, partition_dirname, short_run_id


def episodes_asset(files, *, name="episodes", metadata=None, partitions_def=None, shards=2):
    items = [{"episode": i, "image": path} for i, (path, _) in enumerate(files)]

    @dg.asset(
        name=name,
        io_manager_key="refiner",
        metadata=metadata or {},
        partitions_def=partitions_def,
    )
    def _episodes() -> mdr.Pipeline:
        return mdr.from_items(
            items,
            items_per_shard=max(1, len(items) // shards),
            dtypes={"image": mdr.datatype.image_path()},
        )

    return _episodes


def consumer_asset(upstream_key: str, seen: dict):
    @dg.asset(ins={"table": dg.AssetIn(key=upstream_key)})
    def consumer(table) -> None:
        seen["table"] = table

    return consumer


def output_metadata(result: dg.ExecuteInJobResult, key: str) -> dict:
    [mat] = [
        m
        for m in result.get_asset_materialization_events()
        if m.asset_key == dg.AssetKey.from_user_string(key)
    ]
    return {k: v.value for k, v in mat.materialization.metadata.items()}


def partition_root(instance: dg.DagsterInstance, *parts: str) -> str:
    return os.path.join(instance.storage_directory(), "refiner", *parts)


def current_pointer(folder: str) -> dict:
    with open(os.path.join(folder, CURRENT_POINTER)) as f:
        return json.load(f)


def tree(folder: str) -> dict[str, bytes]:
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, folder)] = f.read()
    return found


def test_blob_io_manager_writes_publishes_and_loads_references(dagster_instance, media):
    files = media(6)
    episodes = episodes_asset(files, metadata={"refiner/target_bytes": 40})
    finalized = rd.build_finalization_asset(episodes)
    seen: dict = {}
    consumer = consumer_asset("episodes_finalized", seen)
    result = dg.materialize(
        [episodes, finalized, consumer],
        instance=dagster_instance,
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=2)},
    )
    assert result.success

    root = partition_root(dagster_instance, "episodes")
    pointer = current_pointer(root)
    version_dir = os.path.join(root, pointer["version"])
    assert pointer["version"] == f"v-{short_run_id(result.run_id)}"
    assert pointer["url"] == version_dir and pointer["format"] == "parquet"
    assert sorted(n for n in os.listdir(root) if n.startswith("v-")) == [pointer["version"]]

    written = output_metadata(result, "episodes")
    assert written["dagster/uri"] == version_dir
    assert written["dagster/row_count"] == 6
    assert written["assets_written"] == 6
    sizes = [len(data) for _, data in files]
    assert written["block_bytes"] == sum(sizes)
    assert written["blocks_written"] == 5
    assert written["refiner/version"] == pointer["version"]

    # blocks and table files landed inside the version folder
    stored = tree(version_dir)
    blocks = [k for k in stored if k.startswith("assets/")]
    assert sum(len(stored[b]) for b in blocks) == sum(sizes)
    assert len(blocks) == written["blocks_written"]

    table = seen["table"]
    assert isinstance(table, mdr.Pipeline)
    rows = sorted(table.iter_rows(), key=lambda r: r.episode)
    assert len(rows) == 6
    for row, (_, data) in zip(rows, files, strict=True):
        ref = row.image
        assert set(ref) == {"path", "offset", "size"}
        assert ref["path"].startswith(version_dir + os.sep)
        assert mdr.read_blob(ref) == data


def test_load_input_from_dataset_asset_has_blob_reference_dtypes(dagster_instance, media):
    files = media(3)
    episodes = episodes_asset(files, shards=1)
    finalized = rd.build_finalization_asset(episodes)
    seen: dict = {}

    @dg.asset(ins={"table": dg.AssetIn(key="episodes")}, deps=[finalized])
    def consumer(table) -> None:
        seen["table"] = table

    defs = dg.Definitions(
        assets=[episodes, finalized, consumer],
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=1)},
    )
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=dagster_instance
    )
    assert result.success
    pipeline = seen["table"]
    [data_file] = [
        f
        for f in os.listdir(current_pointer(partition_root(dagster_instance, "episodes"))["url"])
        if f.endswith(".parquet")
    ]
    assert data_file
    # the loaded pipeline's schema marks the column as a blob reference
    pipeline.plan()
    field = pipeline.source.schema_hint().field("image")
    info = mdr.datatype.asset_of(field)
    assert (info.kind, info.form) == ("image", "blob")
    assert field.type == mdr.datatype.blob_reference("image").arrow_type
    got = {r.episode: mdr.read_blob(r.image) for r in pipeline.iter_rows()}
    assert got == {i: data for i, (_, data) in enumerate(files)}


def test_rematerialization_is_atomic(dagster_instance, media):
    files = media(4)
    episodes = episodes_asset(files)
    finalized = rd.build_finalization_asset(episodes)
    # keep only the published version, so publishing the second deletes the first
    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=2, keep_versions=1)}
    assert dg.materialize(
        [episodes, finalized], instance=dagster_instance, resources=resources
    ).success
    root = partition_root(dagster_instance, "episodes")
    first = current_pointer(root)
    first_tree = tree(first["url"])

    # a failing second materialization: a source file vanished, missing_policy="error"
    path, data = files[2]
    os.remove(path)
    failed = dg.materialize(
        [episodes, finalized],
        instance=dagster_instance,
        resources=resources,
        raise_on_error=False,
    )
    assert not failed.success
    assert current_pointer(root) == first
    assert tree(first["url"]) == first_tree
    assert [n for n in os.listdir(root) if n.startswith("v-")] == [first["version"]]
    with open(path, "wb") as f:
        f.write(data)

    # a successful write is not visible until its finalization asset ran
    written = dg.materialize([episodes], instance=dagster_instance, resources=resources)
    assert written.success
    second_version = f"v-{short_run_id(written.run_id)}"
    assert current_pointer(root) == first
    assert sorted(n for n in os.listdir(root) if n.startswith("v-")) == sorted(
        [first["version"], second_version]
    )
    seen: dict = {}
    consumer = consumer_asset("episodes", seen)
    assert dg.materialize(
        [episodes, consumer], instance=dagster_instance, resources=resources, selection=[consumer]
    ).success
    assert {r.image["path"].split(os.sep)[-5] for r in seen["table"].iter_rows()} == {
        first["version"]
    }

    published = dg.materialize(
        [episodes, finalized], instance=dagster_instance, resources=resources, selection=[finalized]
    )
    assert published.success
    now = current_pointer(root)
    assert now["version"] == second_version
    assert [n for n in os.listdir(root) if n.startswith("v-")] == [second_version]
    assert not os.path.exists(first["url"])
    meta = output_metadata(published, "episodes_finalized")
    assert meta["rows_written"] == 4 and meta["refiner/version"] == second_version


@pytest.mark.parametrize("fmt", ["jsonl", "lance"])
def test_format_from_definition_metadata(dagster_instance, media, fmt):
    files = media(3)
    episodes = episodes_asset(files, metadata={"refiner/format": fmt}, shards=1)
    finalized = rd.build_finalization_asset(episodes)
    seen: dict = {}
    consumer = consumer_asset("episodes_finalized", seen)
    result = dg.materialize(
        [episodes, finalized, consumer],
        instance=dagster_instance,
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=1)},
    )
    assert result.success
    pointer = current_pointer(partition_root(dagster_instance, "episodes"))
    assert pointer["format"] == fmt
    if fmt == "jsonl":
        assert any(n.endswith(".jsonl") for n in os.listdir(pointer["url"]))
    else:  # the version folder is a Lance dataset with one committed version
        assert os.listdir(os.path.join(pointer["url"], "_versions"))
    rows = sorted(seen["table"].iter_rows(), key=lambda r: r.episode)
    assert [mdr.read_blob(r.image) for r in rows] == [data for _, data in files]


def test_file_io_manager_copies_each_asset(dagster_instance, media):
    files = media(3)
    episodes = episodes_asset(files, metadata={"refiner/subdir": "media"}, shards=1)
    finalized = rd.build_finalization_asset(episodes)
    seen: dict = {}
    consumer = consumer_asset("episodes_finalized", seen)
    result = dg.materialize(
        [episodes, finalized, consumer],
        instance=dagster_instance,
        resources={"refiner": rd.RefinerFileIOManager(num_workers=1)},
    )
    assert result.success
    version_dir = current_pointer(partition_root(dagster_instance, "episodes"))["url"]
    rows = sorted(seen["table"].iter_rows(), key=lambda r: r.episode)
    for row, (_, data) in zip(rows, files, strict=True):
        assert isinstance(row.image, str)
        assert row.image.startswith(os.path.join(version_dir, "media") + os.sep)
        with open(row.image, "rb") as f:
            assert f.read() == data
    assert output_metadata(result, "episodes_finalized")["assets_written"] == 3


def test_static_and_dynamic_partitions_land_in_separate_folders(dagster_instance, media):
    files = media(4)
    static = dg.StaticPartitionsDefinition(["left", "right/arm"])
    dynamic = dg.DynamicPartitionsDefinition(name="batches")
    by_static = episodes_asset(files[:2], name="by_static", partitions_def=static, shards=1)
    by_dynamic = episodes_asset(files[2:], name="by_dynamic", partitions_def=dynamic, shards=1)
    assets = [
        by_static,
        rd.build_finalization_asset(by_static),
        by_dynamic,
        rd.build_finalization_asset(by_dynamic),
    ]
    dagster_instance.add_dynamic_partitions("batches", ["2024-01-01T00:00", "b2"])
    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=1)}
    for key in ["left", "right/arm"]:
        assert dg.materialize(
            assets[:2], instance=dagster_instance, resources=resources, partition_key=key
        ).success
    for key in ["2024-01-01T00:00", "b2"]:
        assert dg.materialize(
            assets[2:], instance=dagster_instance, resources=resources, partition_key=key
        ).success

    static_root = partition_root(dagster_instance, "by_static")
    dynamic_root = partition_root(dagster_instance, "by_dynamic")
    assert sorted(os.listdir(static_root)) == sorted(["left", partition_dirname("right/arm")])
    assert partition_dirname("right/arm").startswith("right_arm-")
    assert sorted(os.listdir(dynamic_root)) == sorted([partition_dirname("2024-01-01T00:00"), "b2"])
    for root in (static_root, dynamic_root):
        for part in os.listdir(root):
            pointer = current_pointer(os.path.join(root, part))
            assert pointer["url"].startswith(os.path.join(root, part) + os.sep)
            assert pointer["rows_written"] == 2

    # an unpartitioned downstream asset receives every partition, keyed by partition key
    everything: dict = {}

    @dg.asset(ins={"tables": dg.AssetIn(key="by_dynamic_finalized")})
    def all_batches(tables) -> None:
        everything.update(tables)

    assert dg.materialize(
        [*assets[2:], all_batches],
        instance=dagster_instance,
        resources=resources,
        selection=[all_batches],
    ).success
    assert sorted(everything) == ["2024-01-01T00:00", "b2"]
    assert all(isinstance(p, mdr.Pipeline) for p in everything.values())

    # a partitioned downstream asset receives its own partition's table
    seen: dict = {}

    @dg.asset(partitions_def=static, ins={"table": dg.AssetIn(key="by_static_finalized")})
    def per_partition(table) -> None:
        seen["table"] = table

    assert dg.materialize(
        [*assets[:2], per_partition],
        instance=dagster_instance,
        resources=resources,
        partition_key="right/arm",
        selection=[per_partition],
    ).success
    assert sorted(mdr.read_blob(r.image) for r in seen["table"].iter_rows()) == sorted(
        data for _, data in files[:2]
    )


def test_returning_a_sequence_is_a_clear_error(dagster_instance, tmp_path):
    @dg.asset(io_manager_key="refiner")
    def wrong() -> mdr.PipelineSequence:
        return mdr.from_items([{"a": 1}]).write_parquet(str(tmp_path / "x"))

    with pytest.raises(TypeError, match="return the lazy mdr.Pipeline"):
        dg.materialize(
            [wrong], instance=dagster_instance, resources={"refiner": rd.RefinerBlobIOManager()}
        )


def test_unknown_metadata_key_names_the_asset(dagster_instance, media):
    episodes = episodes_asset(media(1), metadata={"refiner/fromat": "jsonl"})
    with pytest.raises(ValueError, match=r"asset episodes: unknown metadata key 'refiner/fromat'"):
        dg.materialize(
            [episodes], instance=dagster_instance, resources={"refiner": rd.RefinerBlobIOManager()}
        )


def moto_s3_resource(s3_server) -> S3Resource:
    """A dagster-aws S3Resource pointing at the test's moto server."""
    options = s3_server.storage_options()
    return S3Resource(
        endpoint_url=options["endpoint_url"],
        aws_access_key_id=options["key"],
        aws_secret_access_key=options["secret"],
        region_name="us-east-1",
    )


@pytest.mark.parametrize("fmt", ["parquet", "lance"])
def test_s3_storage_from_s3_resource(dagster_instance, media, s3_server, s3_bucket, fmt):
    files = media(4)
    episodes = episodes_asset(files, metadata={"refiner/target_bytes": 30, "refiner/format": fmt})
    finalized = rd.build_finalization_asset(episodes)
    seen: dict = {}
    consumer = consumer_asset("episodes_finalized", seen)
    options = s3_server.storage_options()
    s3 = moto_s3_resource(s3_server)
    manager = rd.RefinerBlobIOManager(base_url=f"s3://{s3_bucket}/datasets", s3=s3, num_workers=2)
    checks = rd.build_dataset_checks(finalized)
    result = dg.materialize(
        [episodes, finalized, consumer, *checks],
        instance=dagster_instance,
        resources={"refiner": manager},
    )
    assert result.success
    assert all(e.passed for e in result.get_asset_check_evaluations())
    version = f"v-{short_run_id(result.run_id)}"
    keys = s3_server.keys(s3_bucket)
    assert f"datasets/episodes/{CURRENT_POINTER}" in keys
    blocks = [k for k in keys if k.startswith(f"datasets/episodes/{version}/assets/")]
    assert blocks and all("/block-" in k for k in blocks)
    assert any(k.endswith(f".{fmt}") for k in keys)
    assert not s3_server.open_uploads(s3_bucket)
    rows = sorted(seen["table"].iter_rows(), key=lambda r: r.episode)
    for row, (_, data) in zip(rows, files, strict=True):
        assert row.image["path"].startswith(f"s3://{s3_bucket}/datasets/episodes/{version}/")
        assert mdr.read_blob(row.image, storage_options=options) == data
    meta = output_metadata(result, "episodes")
    assert meta["dagster/uri"] == f"s3://{s3_bucket}/datasets/episodes/{version}"
    assert meta["block_bytes"] == sum(len(d) for _, d in files)


def test_media_on_s3_is_read_with_the_s3_resource_when_tables_are_local(
    dagster_instance, media, s3_server, s3_bucket
):
    files = media(3)
    client = s3_server.client()
    remote = []
    for path, data in files:
        key = f"raw/{os.path.basename(path)}"
        client.put_object(Bucket=s3_bucket, Key=key, Body=data)
        remote.append((f"s3://{s3_bucket}/{key}", data))
    episodes = episodes_asset(remote)
    s3 = moto_s3_resource(s3_server)
    manager = rd.RefinerBlobIOManager(s3=s3, num_workers=1)  # tables under the instance
    seen: dict = {}
    result = dg.materialize(
        [
            episodes,
            rd.build_finalization_asset(episodes),
            consumer_asset("episodes_finalized", seen),
        ],
        instance=dagster_instance,
        resources={"refiner": manager},
    )
    assert result.success
    rows = sorted(seen["table"].iter_rows(), key=lambda r: r.episode)
    assert [mdr.read_blob(r.image) for r in rows] == [data for _, data in remote]
    assert not rows[0].image["path"].startswith("s3://")


def test_empty_dataset_loads_as_an_empty_pipeline(dagster_instance):
    @dg.asset(io_manager_key="refiner")
    def nothing() -> mdr.Pipeline:
        return mdr.from_items([{"a": 1}, {"a": 2}]).filter(lambda row: False)

    seen: dict = {}
    consumer = consumer_asset("nothing_finalized", seen)
    result = dg.materialize(
        [nothing, rd.build_finalization_asset(nothing), consumer],
        instance=dagster_instance,
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=1)},
    )
    assert result.success
    assert output_metadata(result, "nothing_finalized")["rows_written"] == 0
    assert seen["table"].materialize() == []


def test_s3_resource_becomes_s3fs_storage_options():
    s3 = S3Resource(
        endpoint_url="http://127.0.0.1:9000",
        region_name="eu-west-1",
        aws_access_key_id="AKIA",
        aws_secret_access_key="secret",
        aws_session_token="token",
        use_ssl=False,
        verify=False,
    )
    manager = rd.RefinerBlobIOManager(
        base_url="s3://bucket/prefix", s3=s3, storage_options={"default_block_size": 5 << 20}
    )
    assert manager.resolved_storage_options() == {
        "key": "AKIA",
        "secret": "secret",
        "token": "token",
        "endpoint_url": "http://127.0.0.1:9000",
        "use_ssl": False,
        "client_kwargs": {"region_name": "eu-west-1", "verify": False},
        "config_kwargs": {"retries": {"max_attempts": 5}},
        "default_block_size": 5 << 20,
    }
    # the S3 credentials are never applied to a local folder
    local = rd.RefinerBlobIOManager(base_url="/data/refiner", s3=s3)
    assert local.resolved_storage_options() == {}
