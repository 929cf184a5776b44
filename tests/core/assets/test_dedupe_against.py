"""BlobAssetConfig(dedupe="content", dedupe_against=...): assets an earlier output stored are not written again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import refiner_core as mdr
from refiner_core.errors import StageFailed
from tests.s3_fixtures import *  # noqa: F403

from .media import blocks, write_files
from .test_dedupe import Store, _crc32c_collision

dt = mdr.datatype
EARLIER = 1000
NEW = 100


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return Store(tmp_path)
    server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return Store(tmp_path, server.storage_options(), bucket)


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> tuple[list[str], list[bytes]]:
    """``EARLIER + NEW`` local files of distinct bytes: their paths and contents."""
    contents = [os.urandom(200 + i % 97) for i in range(EARLIER + NEW)]
    folder = tmp_path_factory.mktemp("sources")
    paths = write_files(folder, {f"frame_{i:05d}.bin": c for i, c in enumerate(contents)})
    return [paths[f"frame_{i:05d}.bin"] for i in range(len(contents))], contents


def write(store: Store, name: str, paths: list[str], shard: int, **config) -> tuple[str, dict]:
    output = store.output(name)
    rows = [{"i": i, "video": path} for i, path in enumerate(paths)]
    summary = (
        mdr.from_items(rows, items_per_shard=shard, dtypes={"video": dt.video_path()})
        .write_parquet(
            output,
            assets=mdr.BlobAssetConfig(dedupe="content", **config),
            storage_options=store.options,
        )
        .launch_local(num_workers=2)
        .summary
    )
    return output, summary.counters


def test_a_second_output_writes_only_the_assets_the_first_lacks(store, sources) -> None:
    paths, contents = sources
    first, _ = write(store, "v1", paths[:EARLIER], shard=250)
    first_bytes = store.block_bytes(first)
    assert first_bytes == sum(map(len, contents[:EARLIER]))

    second, counters = write(store, "v2", paths, shard=300, dedupe_against=(first,))
    new_bytes = sum(map(len, contents[EARLIER:]))
    assert store.block_bytes(second) == new_bytes
    assert counters["block_bytes"] == new_bytes
    assert counters["assets_deduplicated"] == EARLIER
    assert store.block_bytes(first) == first_bytes
    rows = store.rows(second)
    assert [store.read(r["video"]) for r in rows] == contents
    assert all(r["video"]["path"].startswith(f"{first}/assets/") for r in rows[:EARLIER])
    assert all(r["video"]["path"].startswith(f"{second}/assets/") for r in rows[EARLIER:])

    # The second output's index records the references it reused, so a third output
    # deduplicated against the second alone finds every asset.
    third, counters = write(store, "v3", paths, shard=550, dedupe_against=(second,))
    assert counters["block_bytes"] == 0 and counters["assets_deduplicated"] == EARLIER + NEW
    assert [store.read(r["video"]) for r in store.rows(third)] == contents


def test_an_earlier_output_without_a_digest_index_is_refused(tmp_path: Path, sources) -> None:
    paths, _ = sources
    store = Store(tmp_path)
    first = store.output("v1")
    mdr.from_items(
        [{"i": i, "video": p} for i, p in enumerate(paths[:10])], dtypes={"video": dt.video_path()}
    ).write_parquet(first, assets=mdr.BlobAssetConfig(dedupe="source")).launch_local()
    with pytest.raises(StageFailed, match=f"dedupe_against: {first} has no digest index"):
        write(store, "v2", paths[:20], shard=10, dedupe_against=(first,))
    second = tmp_path / "v2"
    assert not blocks(second)
    assert not list(second.glob("*.parquet"))


def test_only_the_kept_attempts_of_an_earlier_output_count(tmp_path: Path, sources) -> None:
    paths, contents = sources
    store = Store(tmp_path)
    first, _ = write(store, "v1", paths[:100], shard=50)
    # An attempt without a manifest (rejected, or crashed before writing it) is not kept:
    # its index must not be trusted, whatever its blocks hold.
    manifests = sorted((tmp_path / "v1" / "_refiner" / "attempts").glob("*.json"))
    manifests[0].unlink()
    _, counters = write(store, "v2", paths[:100], shard=100, dedupe_against=(first,))
    assert counters["assets_deduplicated"] == 50
    assert counters["block_bytes"] == sum(map(len, contents[:50]))


def test_bytes_whose_crc32c_collides_with_an_earlier_asset_are_stored(tmp_path: Path) -> None:
    first = os.urandom(1000)
    colliding = _crc32c_collision(first)
    files = write_files(tmp_path / "src", {"a.bin": first, "b.bin": colliding})
    store = Store(tmp_path)  # a local output keys on CRC32C and confirms every match
    earlier, _ = write(store, "v1", [files["a.bin"]], shard=1)
    second, counters = write(
        store, "v2", [files["b.bin"], files["a.bin"]], shard=2, dedupe_against=(earlier,)
    )
    assert counters["block_bytes"] == 1000 and counters["assets_deduplicated"] == 1
    assert [store.read(r["video"]) for r in store.rows(second)] == [colliding, first]


def test_dedupe_against_needs_content_dedupe_and_a_tuple_of_folders() -> None:
    with pytest.raises(ValueError, match="needs dedupe='content'"):
        mdr.BlobAssetConfig(dedupe="source", dedupe_against=("/data/v1",))
    with pytest.raises(ValueError, match=r"wrap a single folder as \(folder,\)"):
        mdr.BlobAssetConfig(dedupe="content", dedupe_against="/data/v1")  # type: ignore[arg-type]
    config = mdr.BlobAssetConfig(dedupe="content", dedupe_against=["/data/v1"])  # type: ignore[arg-type]
    assert config.dedupe_against == ("/data/v1",)
