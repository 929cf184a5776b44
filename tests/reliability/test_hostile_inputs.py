"""Hostile and careless inputs: each is a clear error up front, or a correct output.

Wrong-typed asset values, sources outside ``allowed_sources`` or on pseudo-filesystems,
filename templates that would hide data or overwrite the engine's files, custom shard
ids that would escape the output, paths that look like globs, empty results and
damaged run folders.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr

dt = mdr.datatype
POLICIES = ("error", "set_null", "drop_row")
CONFIGS = {"file": mdr.FileAssetConfig, "blob": mdr.BlobAssetConfig}


def visible(out: Path) -> list[str]:
    """Files under ``out`` a reader or a user would see (not the engine's ``_refiner/``)."""
    return sorted(
        str(p.relative_to(out))
        for p in out.rglob("*")
        if p.is_file() and not str(p.relative_to(out)).startswith("_refiner")
    )


def first_line(exc: BaseException) -> str:
    return str(exc).split("\n\n", 1)[0]


# wrong-typed asset values -------------------------------------------------------------

WRONG_VALUES = {
    # name: (values, declared dtype, type named, dtype the error suggests)
    "int in a path column": ([5, 6], dt.image_path(), "int", "mdr.datatype.int64()"),
    "float in a path column": ([1.5, 2.5], dt.image_path(), "float", "mdr.datatype.float64()"),
    "bytes in a path column": (
        [b"a.png", b"b.png"],
        dt.image_path(),
        "bytes",
        "mdr.datatype.image_bytes()",
    ),
    "str in a bytes column": (["a.png", "b"], dt.video_bytes(), "str", "mdr.datatype.video_path()"),
}


@pytest.mark.parametrize("mode", sorted(CONFIGS))
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("case", sorted(WRONG_VALUES))
def test_python_values_of_the_wrong_type_fail_under_every_policy(case, policy, mode, tmp_path):
    values, dtype, found, suggested = WRONG_VALUES[case]
    out = tmp_path / "out"
    rows = [{"i": 0, "media": None}, *({"i": k + 1, "media": v} for k, v in enumerate(values))]
    pipeline = mdr.from_items(rows, dtypes={"media": dtype}).write_parquet(
        str(out), assets=CONFIGS[mode](missing_policy=policy)
    )
    with pytest.raises(mdr.StageFailed) as failed:
        pipeline.launch_local(rundir=str(tmp_path / "run"))
    message = first_line(failed.value)
    assert "TypeError: column 'media' is declared" in message
    assert f"row 1 of shard 00000 holds {found} value" in message
    assert suggested in message
    assert "does not exist" not in message  # never mistaken for a missing file
    assert visible(out) == []


ARROW_WRONG = {
    "int64": (pa.array([None, 7], pa.int64()), dt.image_path(), "mdr.datatype.int64()"),
    "double": (pa.array([None, 0.5]), dt.image_path(), "mdr.datatype.float64()"),
    "binary": (pa.array([None, b"x.png"]), dt.file_path(), "mdr.datatype.file_bytes()"),
    "list<element: int64>": (
        pa.array([None, [1, 2]]),
        dt.list_(dt.image_path()),
        "mdr.datatype.list_(mdr.datatype.int64())",
    ),
}


@pytest.mark.parametrize("mode", sorted(CONFIGS))
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("arrow_type", sorted(ARROW_WRONG))
def test_arrow_columns_of_the_wrong_type_fail_before_any_cast(arrow_type, policy, mode, tmp_path):
    array, dtype, suggested = ARROW_WRONG[arrow_type]
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"media": array}), source)
    out = tmp_path / "out"
    pipeline = mdr.read_parquet(str(source), dtypes={"media": dtype}).write_parquet(
        str(out), assets=CONFIGS[mode](missing_policy=policy)
    )
    with pytest.raises(mdr.StageFailed) as failed:
        pipeline.launch_local(rundir=str(tmp_path / "run"))
    message = first_line(failed.value)
    assert f"read_parquet {source}: column 'media' is declared" in message
    assert f"row 1 holds {arrow_type} value" in message
    assert suggested in message
    assert visible(out) == []


def test_the_right_types_still_write(tmp_path):
    image = tmp_path / "a.png"
    image.write_bytes(b"png!")
    rows = [
        {"path": str(image), "data": b"raw", "ref": {"path": str(image), "offset": 1, "size": 2}}
    ]
    dtypes = {"path": dt.image_path(), "data": dt.image_bytes(), "ref": dt.blob_reference("image")}
    out = tmp_path / "out"
    stats = (
        mdr.from_items(rows, dtypes=dtypes)
        .write_parquet(str(out), assets=mdr.BlobAssetConfig())
        .launch_local()
    )
    assert stats.summary.counters["assets_written"] == 3
    [row] = mdr.read_parquet(str(out)).materialize()
    assert [mdr.read_blob(row[c]) for c in ("path", "data", "ref")] == [b"png!", b"raw", b"ng"]


# sources: pseudo-filesystems and allowed_sources -------------------------------------------


@pytest.fixture
def planted_environ():
    """The longest entry of this process's ``/proc/self/environ`` (which forked workers
    share): it must never appear in an output."""
    with open("/proc/self/environ", "rb") as f:
        entries = [e for e in f.read().split(b"\0") if b"=" in e]
    longest = max(entries, key=len)
    assert len(longest) >= 8
    return longest


def _all_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


def _sources(tmp_path) -> dict[str, str]:
    link = tmp_path / "innocent.png"
    link.symlink_to("/proc/self/environ")
    return {
        "/proc/self/environ": "/proc/self/environ",
        "symlink to /proc/self/environ": str(link),
        "file:///proc/self/environ": "file:///proc/self/environ",
        "/dev/zero": "/dev/zero",
        "/sys missing file": "/sys/kernel/no-such-file",
    }


WRITERS = {
    "parquet": lambda p, out, a: p.write_parquet(out, assets=a),
    "jsonl": lambda p, out, a: p.write_jsonl(out, assets=a),
    "lance": lambda p, out, a: p.write_lance(out, assets=a),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("mode", sorted(CONFIGS))
@pytest.mark.parametrize("policy", POLICIES)
def test_pseudo_filesystem_sources_are_refused_under_every_policy(
    policy, mode, writer, tmp_path, planted_environ
):
    good = tmp_path / "good.png"
    good.write_bytes(b"fine")
    for name, source in _sources(tmp_path).items():
        out = tmp_path / f"out-{abs(hash(name))}"
        pipeline = mdr.from_items(
            [{"i": 0, "img": str(good)}, {"i": 1, "img": source}],
            dtypes={"img": dt.image_path()},
        )
        sequence = WRITERS[writer](pipeline, str(out), CONFIGS[mode](missing_policy=policy))
        with pytest.raises(mdr.StageFailed) as failed:
            sequence.launch_local(rundir=str(tmp_path / f"run-{abs(hash(name))}"))
        message = first_line(failed.value)
        assert "column 'img', row 1 of shard 00000" in message, name
        assert "a pseudo-filesystem" in message and "allowed_sources" in message, name
        assert "missing" not in message and "does not exist" not in message, name
        if out.exists():
            assert planted_environ not in _all_bytes(out), name
            assert visible(out) == [] or writer == "lance", name


@pytest.mark.parametrize("mode", sorted(CONFIGS))
def test_allowed_sources_admit_listed_folders_only(mode, tmp_path):
    media, other = tmp_path / "media", tmp_path / "other"
    media.mkdir()
    other.mkdir()
    (media / "a.png").write_bytes(b"a")
    (other / "b.png").write_bytes(b"b")
    (media / "escape.png").symlink_to(other / "b.png")
    config = CONFIGS[mode](allowed_sources=[str(media)])

    def write(path: Path, name: str):
        return (
            mdr.from_items([{"img": str(path)}], dtypes={"img": dt.image_path()})
            .write_parquet(str(tmp_path / name), assets=config)
            .launch_local(rundir=str(tmp_path / f"run-{name}"))
        )

    assert write(media / "a.png", "ok").summary.counters["assets_written"] == 1
    for name, path in [("outside", other / "b.png"), ("link", media / "escape.png")]:
        with pytest.raises(mdr.StageFailed, match="is outside allowed_sources") as failed:
            write(path, name)
        assert "column 'img', row 0" in str(failed.value)
    # the sibling folder /.../media-private is not under /.../media
    private = tmp_path / "media-private"
    private.mkdir()
    (private / "c.png").write_bytes(b"c")
    with pytest.raises(mdr.StageFailed, match="is outside allowed_sources"):
        write(private / "c.png", "sibling")


def test_allowed_sources_url_prefixes_and_validation():
    from refiner_core.sinks.assets.sources import RefusedSource, SourcePolicy

    policy = SourcePolicy(["s3://bucket/media", "https://cdn.example.com/"])
    policy.check("s3://bucket/media/a/b.png")
    policy.check("https://cdn.example.com/x.png")
    for refused in (
        "s3://bucket/media-private/a.png",
        "s3://bucket/media/../secret.png",
        "s3://other/media/a.png",
        "/tmp/a.png",
    ):
        with pytest.raises(RefusedSource, match="outside allowed_sources"):
            policy.check(refused)
    for bad in ("s3://bucket", ["relative/folder"], [""], [3]):
        with pytest.raises(ValueError, match="allowed_sources"):
            mdr.BlobAssetConfig(allowed_sources=bad)


def test_a_listed_folder_under_dev_is_allowed_but_not_the_rest(tmp_path):
    from refiner_core.sinks.assets.sources import RefusedSource, SourcePolicy

    policy = SourcePolicy(["/dev/shm", "/"])
    policy.check("/dev/shm/frame.png")
    with pytest.raises(RefusedSource, match="pseudo-filesystem"):
        policy.check("/dev/zero")  # "/" does not open /dev
    with pytest.raises(RefusedSource, match="pseudo-filesystem"):
        policy.check("/proc/self/environ")


def test_blob_references_into_proc_are_refused_too(tmp_path, planted_environ):
    out = tmp_path / "out"
    ref = {"path": "/proc/self/environ", "offset": 0, "size": 16}
    for policy in POLICIES:
        pipeline = mdr.from_items([{"ref": ref}], dtypes={"ref": dt.blob_reference()})
        with pytest.raises(mdr.StageFailed, match="pseudo-filesystem"):
            pipeline.write_parquet(
                str(out), assets=mdr.BlobAssetConfig(missing_policy=policy)
            ).launch_local(rundir=str(tmp_path / f"run-{policy}"))
    assert planted_environ not in _all_bytes(out)


# filename templates ---------------------------------------------------------------------

REFUSED_TEMPLATES = {
    "_refiner/attempts/{shard}__{attempt}.json": "reserved for refiner's own files",
    "_{shard}__{attempt}.parquet": "reserved for refiner's own files",
    ".{shard}__{attempt}.parquet": "reserved for refiner's own files",
    "parts/.hidden/{shard}__{attempt}.parquet": "reserved for refiner's own files",
    "parts/_x/{shard}__{attempt}.parquet": "reserved for refiner's own files",
    "media/{shard}__{attempt}.parquet": "inside the asset folder 'media'",
    "media/deeper/{shard}-{attempt}.parquet": "inside the asset folder 'media'",
    "{shard}__{attempt}.txt": "do not end in .parquet or .pq",
    "{shard}__{attempt}.parquet.tmp": "do not end in .parquet or .pq",
}


@pytest.mark.parametrize("template", sorted(REFUSED_TEMPLATES))
def test_templates_whose_files_would_not_read_back_are_refused_up_front(template, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=re.escape(REFUSED_TEMPLATES[template])) as refused:
        mdr.from_items([{"a": 1}]).write_parquet(
            str(out), filename_template=template, assets=mdr.FileAssetConfig(subdir="media")
        )
    assert repr(template) in str(refused.value)
    assert not out.exists()


def test_jsonl_templates_must_end_as_jsonl_reads(tmp_path):
    with pytest.raises(ValueError, match=r"do not end in \.jsonl or \.json or \.ndjson"):
        mdr.from_items([{"a": 1}]).write_jsonl(
            str(tmp_path / "o"), filename_template="{shard}-{attempt}.parquet"
        )


@pytest.mark.parametrize(
    "template",
    ["parts/{shard}-{attempt}.pq", "{shard}/{attempt}.parquet", "x-{attempt}-{shard}.parquet"],
)
def test_accepted_templates_read_back_as_the_dataset(template, tmp_path):
    out = tmp_path / "out"
    stats = (
        mdr.from_items([{"a": i} for i in range(5)], items_per_shard=2)
        .write_parquet(str(out), filename_template=template)
        .launch_local()
    )
    assert stats.summary.counters["rows_written"] == 5
    assert sorted(r.a for r in mdr.read_parquet(str(out)).materialize()) == list(range(5))


# custom shard ids -------------------------------------------------------------------------


class CustomSource:
    """A user source planning the given shard ids, one row each."""

    name = "custom source"

    def __init__(self, ids):
        self.ids = ids

    def plan(self):
        return [mdr.Shard(i, n) for n, i in enumerate(self.ids)]

    def read(self, shard, *, batch_rows, batch_bytes=None):
        yield pa.table({"n": [shard.payload]})

    def schema_hint(self):
        return None


@pytest.mark.parametrize(
    "ids", [[".."], ["a/b"], [".hidden"], ["_x"], ["a__b"], [""], [7], ["x" * 129], ["a", "a"]]
)
def test_unsafe_custom_shard_ids_are_refused_before_anything_is_written(ids, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="custom source planned") as refused:
        mdr.Pipeline(CustomSource(ids)).write_parquet(str(out)).launch_local(
            rundir=str(tmp_path / "run")
        )
    assert repr(ids[-1]) in str(refused.value)
    assert visible(out) == [] if out.exists() else True


def test_safe_custom_shard_ids_write_and_read_back(tmp_path):
    out = tmp_path / "out"
    ids = ["cam-a", "cam_b.2", "0007"]
    stats = mdr.Pipeline(CustomSource(ids)).write_parquet(str(out)).launch_local()
    assert stats.summary.counters["rows_written"] == 3
    assert sorted(r.n for r in mdr.read_parquet(str(out)).materialize()) == [0, 1, 2]


# paths that look like globs, empty results --------------------------------------------------


def test_an_existing_path_with_brackets_is_not_a_glob(tmp_path):
    folder = tmp_path / "take[1]"
    folder.mkdir()
    pq.write_table(pa.table({"a": [1, 2]}), folder / "part[0].parquet")
    assert len(mdr.read_parquet(str(folder / "part[0].parquet")).materialize()) == 2
    assert len(mdr.read_parquet(str(folder)).materialize()) == 2
    (tmp_path / "rows[2].jsonl").write_text('{"a": 1}\n')
    assert len(mdr.read_jsonl(str(tmp_path / "rows[2].jsonl")).materialize()) == 1
    # a real glob still expands
    assert len(mdr.read_parquet(str(tmp_path / "*" / "*.parquet")).materialize()) == 2


@pytest.mark.parametrize("assets", [None, "blob"])
def test_an_empty_result_writes_a_zero_row_file_with_the_schema(assets, tmp_path):
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int32()), "img": ["a", "b"]}), source)
    out = tmp_path / "out"
    pipeline = mdr.read_parquet(str(source), dtypes={"img": dt.image_path()}).filter(
        lambda r: False
    )
    config = mdr.BlobAssetConfig() if assets else None
    stats = pipeline.write_parquet(str(out), assets=config).launch_local()
    assert stats.summary.counters["rows_written"] == 0
    [name] = stats.summary.files
    schema = pq.read_schema(out / name)
    assert schema.names == ["id", "img"]
    assert schema.field("id").type == pa.int32()
    expected = dt.blob_reference("image") if assets else dt.image_path()
    assert schema.field("img").type == expected.to_field("img").type
    assert mdr.read_parquet(str(out)).materialize() == []


def test_only_an_entirely_empty_result_gets_an_empty_file(tmp_path):
    items = mdr.from_items([{"a": i} for i in range(10)], items_per_shard=2)
    out = tmp_path / "sparse"
    stats = items.filter(lambda r: r.a == 3).write_parquet(str(out)).launch_local()
    assert len(stats.summary.files) == 1  # the one shard with a row; no empty files
    assert [r.a for r in mdr.read_parquet(str(out)).materialize()] == [3]
    out = tmp_path / "none.jsonl"
    stats = items.filter(lambda r: False).write_jsonl(str(out)).launch_local()
    [name] = stats.summary.files  # named for the first shard's attempt
    assert name.startswith("00000__") and name.endswith(".jsonl")
    assert stats.summary.counters["files_written"] == 1
    assert mdr.read_jsonl(str(out)).materialize() == []
    # finalizing again (a resume) keeps exactly that one file
    again = items.filter(lambda r: False).write_jsonl(str(out))
    rundir = tmp_path / "run"
    first = again.launch_local(rundir=str(rundir)).summary.files
    assert again.launch_local(rundir=str(rundir)).summary.files == first
    assert sorted(p.name for p in out.glob("*.jsonl")) == list(first)


# damaged run folders -----------------------------------------------------------------------


@pytest.mark.parametrize("content", ["", "{", "[]", '{"name": "x"}'])
def test_a_damaged_run_json_fails_the_resume_naming_the_file_and_the_fix(content, tmp_path):
    rundir = tmp_path / "run"
    rundir.mkdir()
    (rundir / "run.json").write_text(content)
    with pytest.raises(ValueError) as failed:
        mdr.from_items([{"a": 1}]).write_parquet(str(tmp_path / "out")).launch_local(
            rundir=str(rundir)
        )
    message = str(failed.value)
    assert message.startswith(f"{rundir / 'run.json'} (the run's state) ")
    assert f"Delete the rundir {str(rundir)!r}" in message


def test_run_json_is_replaced_whole(tmp_path):
    rundir = tmp_path / "run"
    mdr.from_items([{"a": 1}]).write_parquet(str(tmp_path / "out")).launch_local(rundir=str(rundir))
    # no temporary left over
    assert sorted(os.listdir(rundir)) == ["fingerprint.json", "run.json", "stage-000"]
    (rundir / "stage-000" / "00000.json").write_text("")
    with pytest.raises(ValueError, match="a completed shard's marker.*Delete the file"):
        mdr.from_items([{"a": 1}]).write_parquet(str(tmp_path / "out")).launch_local(
            rundir=str(rundir)
        )


def test_sources_that_are_not_regular_files_are_refused(tmp_path):
    from refiner_core.sinks.assets.sources import RefusedSource, SourcePolicy

    fifo = tmp_path / "stream.png"
    os.mkfifo(fifo)  # reading it would block forever
    with pytest.raises(RefusedSource, match="is not a regular file"):
        SourcePolicy().check(str(fifo))
    folder = tmp_path / "a-folder.png"
    folder.mkdir()
    for mode in sorted(CONFIGS):
        with pytest.raises(mdr.StageFailed, match="is not a regular file") as failed:
            mdr.from_items([{"img": str(folder)}], dtypes={"img": dt.image_path()}).write_parquet(
                str(tmp_path / f"out-{mode}"), assets=CONFIGS[mode](missing_policy="set_null")
            ).launch_local(rundir=str(tmp_path / f"run-{mode}"))
        assert "column 'img', row 0" in str(failed.value)


def test_symlinks_into_sys_are_refused_by_the_device_they_reach(tmp_path):
    from refiner_core.sinks.assets.sources import RefusedSource, SourcePolicy

    target = next(
        (p for p in ("/sys/kernel/uevent_seqnum", "/sys/power/state") if os.path.isfile(p)), None
    )
    if target is None:
        target = "/proc/self/status"
    link = tmp_path / "frame.png"
    link.symlink_to(target)
    with pytest.raises(RefusedSource, match=r"pseudo-filesystem") as refused:
        SourcePolicy().check(str(link))
    assert f"resolved to {os.path.realpath(link)!r}" in str(refused.value)


def test_pseudo_filesystems_are_matched_by_whole_path_components(tmp_path):
    """``/proc`` and what lies under it is refused by path; ``/procedures`` is not."""
    from refiner_core.sinks.assets.sources import RefusedSource, SourcePolicy

    policy = SourcePolicy()
    for refused in ("/proc", "/proc/self/environ", "/sys/", "/dev/../dev/zero", "file:///proc/1"):
        with pytest.raises(RefusedSource, match="pseudo-filesystem"):
            policy.check_local_file(refused)
    for allowed in ("/procedures/a.png", "/system/a.png", "/devices/a.png"):
        assert policy.check_local_file(allowed) == (allowed, None)  # missing, not refused
