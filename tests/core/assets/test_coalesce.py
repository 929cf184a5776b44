"""Complete-blob coalescing: a source blob covered by its references is copied once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import refiner_core as mdr
from refiner_core.io import datafile

from .media import blocks, launch, read_rows, write_files

dt = mdr.datatype
TARGET = 4096


def _sizes(n: int) -> list[int]:
    return [500 + (i * 337) % 1000 for i in range(n)]


@pytest.fixture
def packed(tmp_path):
    """A one-shard packed dataset: 20 assets of 500-1499 bytes in blocks of at most 4 KiB."""
    contents = {f"{i:02d}.bin": os.urandom(size) for i, size in enumerate(_sizes(20))}
    paths = write_files(tmp_path / "src", contents)
    out = tmp_path / "packed"
    launch(
        mdr.from_items(
            [{"i": i, "video": paths[f"{i:02d}.bin"]} for i in range(20)],
            dtypes={"video": dt.video_path()},
        ).write_parquet(str(out), assets=mdr.BlobAssetConfig(target_bytes=TARGET))
    )
    source_blocks = blocks(out)
    assert len(source_blocks) >= 5
    return {
        "out": out,
        "blocks": source_blocks,
        "bytes": [contents[f"{i:02d}.bin"] for i in range(20)],
    }


def _repack(source, output: Path, config, *, keep=None):
    pipeline = mdr.read_parquet(str(source))
    if keep is not None:
        pipeline = pipeline.filter(lambda row: row.i in keep)
    return launch(pipeline.write_parquet(str(output), assets=config))


def _check_rows(output: Path, expected: list[bytes], keep=None):
    rows = sorted(read_rows(output), key=lambda r: r["i"])
    indices = sorted(keep) if keep is not None else list(range(len(expected)))
    assert [r["i"] for r in rows] == indices
    assert [mdr.read_blob(r["video"]) for r in rows] == [expected[i] for i in indices]
    return rows


def test_repack_of_a_fully_referenced_dataset_is_byte_identical(tmp_path, packed):
    out = tmp_path / "repacked"
    summary = _repack(packed["out"], out, mdr.BlobAssetConfig(target_bytes=TARGET))
    new_blocks = blocks(out)
    assert [b.read_bytes() for b in new_blocks] == [b.read_bytes() for b in packed["blocks"]]
    assert [b.name for b in new_blocks] == [b.name for b in packed["blocks"]]
    total = sum(map(len, packed["bytes"]))
    assert summary.counters["blobs_coalesced"] == len(packed["blocks"])
    assert summary.counters["references_coalesced"] == 20
    assert summary.counters["bytes_coalesced"] == total
    assert summary.counters["ranges_copied"] == 0
    assert summary.counters["bytes_range_copied"] == 0
    assert summary.counters["block_bytes"] == total
    rows = _check_rows(out, packed["bytes"])
    # references keep their offsets inside the (identical) blocks
    source_rows = sorted(read_rows(packed["out"]), key=lambda r: r["i"])
    assert [r["video"]["offset"] for r in rows] == [r["video"]["offset"] for r in source_rows]


def test_partial_selection_copies_only_the_referenced_ranges(tmp_path, packed):
    source_rows = sorted(read_rows(packed["out"]), key=lambda r: r["i"])
    # drop the first row of every source block: no block stays fully referenced
    firsts = {}
    for row in source_rows:
        firsts.setdefault(row["video"]["path"], row["i"])
    keep = set(range(20)) - set(firsts.values())
    out = tmp_path / "partial"
    summary = _repack(packed["out"], out, mdr.BlobAssetConfig(target_bytes=TARGET), keep=keep)
    selected = sum(len(packed["bytes"][i]) for i in keep)
    assert summary.counters["blobs_coalesced"] == 0
    assert summary.counters["references_coalesced"] == 0
    assert summary.counters["ranges_copied"] == len(keep)
    assert summary.counters["bytes_range_copied"] == selected
    assert sum(b.stat().st_size for b in blocks(out)) == selected
    _check_rows(out, packed["bytes"], keep)


def test_mixed_selection_coalesces_the_complete_blobs_only(tmp_path, packed):
    source_rows = sorted(read_rows(packed["out"]), key=lambda r: r["i"])
    by_block: dict[str, list[int]] = {}
    for row in source_rows:
        by_block.setdefault(row["video"]["path"], []).append(row["i"])
    first_block = by_block[str(packed["blocks"][0])]
    keep = set(range(20)) - {first_block[0]}
    out = tmp_path / "mixed"
    summary = _repack(packed["out"], out, mdr.BlobAssetConfig(target_bytes=TARGET), keep=keep)
    assert summary.counters["blobs_coalesced"] == len(packed["blocks"]) - 1
    assert summary.counters["ranges_copied"] == len(first_block) - 1
    assert summary.counters["references_coalesced"] == 20 - len(first_block)
    assert sum(b.stat().st_size for b in blocks(out)) == sum(len(packed["bytes"][i]) for i in keep)
    _check_rows(out, packed["bytes"], keep)


@pytest.mark.parametrize("policy", ["set_null", "drop_row"])
def test_other_policies_copy_every_range(tmp_path, packed, policy):
    out = tmp_path / policy
    summary = _repack(
        packed["out"], out, mdr.BlobAssetConfig(target_bytes=TARGET, missing_policy=policy)
    )
    assert summary.counters["blobs_coalesced"] == 0
    assert summary.counters["references_coalesced"] == 0
    assert summary.counters["ranges_copied"] == 20
    assert summary.counters["bytes_range_copied"] == sum(map(len, packed["bytes"]))
    _check_rows(out, packed["bytes"])


def test_multi_shard_source_reads_back(tmp_path):
    contents = {f"{i:02d}.bin": os.urandom(300 + i) for i in range(9)}
    paths = write_files(tmp_path / "src", contents)
    source = tmp_path / "packed"
    launch(
        mdr.from_items(
            [{"i": i, "video": paths[f"{i:02d}.bin"]} for i in range(9)],
            items_per_shard=4,
            dtypes={"video": dt.video_path()},
        ).write_parquet(str(source), assets=mdr.BlobAssetConfig(target_bytes=700)),
        num_workers=2,
    )
    out = tmp_path / "repacked"
    summary = _repack(source, out, mdr.BlobAssetConfig(target_bytes=700))
    assert summary.counters["blobs_coalesced"] == len(blocks(source))
    assert summary.counters["references_coalesced"] == 9 and summary.counters["ranges_copied"] == 0
    _check_rows(out, [contents[f"{i:02d}.bin"] for i in range(9)])


# hand-made references over one blob -------------------------------------------------

BLOB = b"0123456789ABCDEF"


def _write_refs(tmp_path, refs, config=None, name="out"):
    out = tmp_path / name
    stats = (
        mdr.from_items(
            [{"i": i, "image": ref} for i, ref in enumerate(refs)],
            dtypes={"image": dt.blob_reference("image")},
        )
        .write_parquet(str(out), assets=config or mdr.BlobAssetConfig(target_bytes=64))
        .launch_local()
    )
    return out, stats.summary


@pytest.fixture
def blob(tmp_path):
    path = tmp_path / "source-block.bin"
    path.write_bytes(BLOB)
    return str(path)


def test_overlapping_and_duplicate_references_coalesce(tmp_path, blob):
    spans = [(0, 6), (4, 8), (4, 8), (12, 4), (10, 4), (0, 16), (15, 1), (3, 0)]
    refs = [{"path": blob, "offset": o, "size": s} for o, s in spans]
    out, summary = _write_refs(tmp_path, refs)
    (block,) = blocks(out)
    assert block.read_bytes() == BLOB
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    assert [mdr.read_blob(r["image"]) for r in rows] == [BLOB[o : o + s] for o, s in spans]
    assert [(r["image"]["offset"], r["image"]["size"]) for r in rows] == spans
    assert summary.counters["blobs_coalesced"] == 1
    assert summary.counters["references_coalesced"] == len(spans)
    assert summary.counters["bytes_coalesced"] == len(BLOB)
    assert summary.counters["ranges_copied"] == 0


def test_two_blobs_share_an_output_block_with_translated_offsets(tmp_path, blob):
    second = tmp_path / "second.bin"
    second.write_bytes(b"xyz")
    refs = [
        {"path": str(second), "offset": 1, "size": 2},
        {"path": blob, "offset": 8, "size": 8},
        {"path": str(second), "offset": 0, "size": 1},
        {"path": blob, "offset": 0, "size": 8},
    ]
    out, summary = _write_refs(tmp_path, refs)
    (block,) = blocks(out)
    assert block.read_bytes() == b"xyz" + BLOB
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    assert [r["image"]["offset"] for r in rows] == [1, 11, 0, 3]
    assert [mdr.read_blob(r["image"]) for r in rows] == [b"yz", b"89ABCDEF", b"x", b"01234567"]
    assert (
        summary.counters["blobs_coalesced"] == 2 and summary.counters["references_coalesced"] == 4
    )


@pytest.mark.parametrize(
    "spans",
    [[(0, 4), (5, 11)], [(0, 10)], [(2, 14)], [(0, 8), (8, 7)]],
    ids=["gap", "short of the end", "late start", "one byte short"],
)
def test_incomplete_coverage_copies_ranges(tmp_path, blob, spans):
    refs = [{"path": blob, "offset": o, "size": s} for o, s in spans]
    out, summary = _write_refs(tmp_path, refs)
    assert summary.counters["blobs_coalesced"] == 0
    assert summary.counters["ranges_copied"] == len(spans)
    assert summary.counters["bytes_range_copied"] == sum(s for _, s in spans)
    (block,) = blocks(out)
    assert block.read_bytes() == b"".join(BLOB[o : o + s] for o, s in spans)
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    assert [mdr.read_blob(r["image"]) for r in rows] == [BLOB[o : o + s] for o, s in spans]


def test_a_malformed_reference_falls_back_and_fails_naming_it(tmp_path, blob):
    refs = [
        {"path": blob, "offset": 0, "size": 8},
        {"path": blob, "offset": 8, "size": 8},
        {"path": "", "offset": 0, "size": 3},
    ]
    with pytest.raises(mdr.StageFailed) as caught:
        _write_refs(tmp_path, refs)
    message = str(caught.value).split("\n\n", 1)[0]
    assert "ValueError" in message
    assert "column 'image', row 2" in message
    assert "blob reference path must be a non-empty string" in message
    assert blocks(tmp_path / "out") == []


def test_a_reference_past_the_end_falls_back_and_fails_naming_it(tmp_path, blob):
    refs = [
        {"path": blob, "offset": 0, "size": 16},
        {"path": blob, "offset": 10, "size": 7},
    ]
    with pytest.raises(mdr.StageFailed) as caught:
        _write_refs(tmp_path, refs)
    message = str(caught.value).split("\n\n", 1)[0]
    assert "EOFError" in message and "column 'image', row 1" in message
    assert "the blob has 16 bytes" in message


def test_a_missing_source_blob_fails_under_error(tmp_path, blob):
    refs = [
        {"path": blob, "offset": 0, "size": 16},
        {"path": str(tmp_path / "gone.bin"), "offset": 0, "size": 2},
    ]
    with pytest.raises(mdr.StageFailed, match="column 'image', row 1"):
        _write_refs(tmp_path, refs)


def test_coalescing_into_file_assets_is_not_attempted(tmp_path, blob):
    """FileAssetConfig copies every reference to its own file."""
    refs = [{"path": blob, "offset": 0, "size": 8}, {"path": blob, "offset": 8, "size": 8}]
    out, summary = _write_refs(tmp_path, refs, mdr.FileAssetConfig())
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    assert [Path(r["image"]).read_bytes() for r in rows] == [BLOB[:8], BLOB[8:]]
    assert summary.counters["blobs_coalesced"] == 0


# large blobs: one copy into a block of their own ---------------------------------------


def test_large_blob_is_copied_whole_into_its_own_block(tmp_path, monkeypatch):
    big = os.urandom(9 * 1024 * 1024)
    small = [os.urandom(1000 + i) for i in range(3)]
    paths = write_files(
        tmp_path / "src", {"big.bin": big, **{f"s{i}.bin": d for i, d in enumerate(small)}}
    )
    source = tmp_path / "packed"
    config = mdr.BlobAssetConfig(target_bytes=8 * 1024 * 1024)
    names = ["big.bin", "s0.bin", "s1.bin", "s2.bin"]
    launch(
        mdr.from_items(
            [{"i": i, "video": paths[n]} for i, n in enumerate(names)],
            dtypes={"video": dt.video_path()},
        ).write_parquet(str(source), assets=config)
    )
    source_blocks = blocks(source)
    assert [b.stat().st_size for b in source_blocks] == [len(big), sum(map(len, small))]

    # record whole-file copies (the worker process is forked from this one)
    calls = tmp_path / "copies"
    calls.mkdir()
    original = datafile.copy_file

    def recording_copy_file(src, dst):
        (calls / f"{len(list(calls.iterdir()))}").write_text(f"{src}\n{dst}")
        return original(src, dst)

    monkeypatch.setattr(datafile, "copy_file", recording_copy_file)
    out = tmp_path / "repacked"
    summary = _repack(source, out, config)
    new_blocks = blocks(out)
    assert [b.read_bytes() for b in new_blocks] == [b.read_bytes() for b in source_blocks]
    copies = [p.read_text().split("\n") for p in sorted(calls.iterdir())]
    assert copies == [[str(source_blocks[0]), str(new_blocks[0])]]
    assert summary.counters["blobs_coalesced"] == 2
    assert summary.counters["references_coalesced"] == 4
    assert summary.counters["bytes_coalesced"] == len(big) + sum(map(len, small))
    assert summary.counters["ranges_copied"] == 0
    assert summary.counters["blocks_written"] == 2
    _check_rows(out, [big, *small])


def test_a_failed_whole_copy_fails_naming_the_row_and_leaves_no_block(tmp_path, monkeypatch):
    contents = {f"b{i}.bin": os.urandom(5000 + i) for i in range(6)}
    paths = write_files(tmp_path / "src", contents)
    source = tmp_path / "packed"
    config = mdr.BlobAssetConfig(target_bytes=4096)  # every asset gets a block of its own
    launch(
        mdr.from_items(
            [{"i": i, "video": paths[f"b{i}.bin"]} for i in range(6)],
            dtypes={"video": dt.video_path()},
        ).write_parquet(str(source), assets=config)
    )
    source_blocks = blocks(source)
    assert len(source_blocks) == 6
    original = datafile.copy_file

    def failing_copy_file(src, dst):
        if src == str(source_blocks[3]):
            raise OSError(f"disk full while copying {src}")
        return original(src, dst)

    monkeypatch.setattr(datafile, "copy_file", failing_copy_file)  # the forked worker inherits it
    out = tmp_path / "repacked"
    with pytest.raises(mdr.StageFailed, match=r"(?s)row 3.*disk full"):
        _repack(source, out, config)
    assert not list(out.rglob("block-*.bin"))


def test_list_columns_of_references_are_copied_by_range(tmp_path, blob):
    """Coalescing looks at scalar reference columns only; lists keep per-range copies."""
    rows = [
        {"i": 0, "frames": [{"path": blob, "offset": 0, "size": 8}]},
        {"i": 1, "frames": [{"path": blob, "offset": 8, "size": 8}, None]},
    ]
    out = tmp_path / "out"
    summary = launch(
        mdr.from_items(rows, dtypes={"frames": dt.list_(dt.blob_reference("image"))}).write_parquet(
            str(out), assets=mdr.BlobAssetConfig()
        )
    )
    assert summary.counters["blobs_coalesced"] == 0 and summary.counters["ranges_copied"] == 2
    written = sorted(read_rows(out), key=lambda r: r["i"])
    assert [mdr.read_blob(written[0]["frames"][0]), mdr.read_blob(written[1]["frames"][0])] == [
        BLOB[:8],
        BLOB[8:],
    ]
    assert written[1]["frames"][1] is None
