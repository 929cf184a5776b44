"""Bad arguments fail when the pipeline is built, before anything runs."""

from __future__ import annotations

import pytest

import refiner_core as mdr

from .helpers import all_files

BAD_NUMBERS = [0, -1, 1.5, True, None, "4"]


def base() -> mdr.Pipeline:
    return mdr.from_items([{"i": 1}])


async def afn(row):
    return {}


def bfn(rows):
    return rows


@pytest.mark.parametrize("value", BAD_NUMBERS)
@pytest.mark.parametrize(
    ("name", "build"),
    [
        ("max_in_flight", lambda v: base().map_async(afn, max_in_flight=v)),
        ("max_in_flight", lambda v: base().batch_map_async(bfn, batch_size=2, max_in_flight=v)),
        ("batch_size", lambda v: base().batch_map(bfn, batch_size=v)),
        ("batch_size", lambda v: base().batch_map_async(bfn, batch_size=v)),
        ("max_block_rows", lambda v: base().with_max_block_rows(v)),
        ("max_vectorized_block_bytes", lambda v: base().with_max_vectorized_block_bytes(v)),
        ("items_per_shard", lambda v: mdr.from_items([1], items_per_shard=v)),
    ],
)
def test_non_positive_limits_fail_at_build_time(name, build, value):
    with pytest.raises(ValueError, match=name):
        build(value)


@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_num_workers_must_be_positive(tmp_path, value):
    calls = []
    sequence = base().map(lambda r: calls.append(1) or {}).write_parquet(str(tmp_path / "out"))
    with pytest.raises(ValueError, match="num_workers"):
        sequence.launch_local(num_workers=value)
    assert calls == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["map_async", "batch_map", "batch_map_async"])
def test_exactly_one_of_fn_and_factory(kind):
    extra = {} if kind == "map_async" else {"batch_size": 2}
    method = getattr(base(), kind)
    with pytest.raises(ValueError, match="exactly one of fn or factory"):
        method(afn, factory=lambda: afn, **extra)
    with pytest.raises(ValueError, match="exactly one of fn or factory"):
        method(**extra)
    with pytest.raises(TypeError, match="callable"):
        method(factory=42, **extra)


@pytest.mark.parametrize("kind", ["map", "filter", "flat_map"])
def test_sync_steps_need_a_callable(kind):
    with pytest.raises(TypeError, match="callable"):
        getattr(base(), kind)(None)


def test_batch_size_is_required():
    with pytest.raises(TypeError):
        base().batch_map(bfn)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "template",
    [
        "../x-{shard}-{attempt}.parquet",
        "parts/../../x-{shard}-{attempt}.parquet",
        "/elsewhere/x-{shard}-{attempt}.parquet",
        "s3://bucket/x-{shard}-{attempt}.parquet",
        "C:/x-{shard}-{attempt}.parquet",
        "a\\x-{shard}-{attempt}.parquet",
        "parts//x-{shard}-{attempt}.parquet",
        "x-{shard}.parquet",
        "x-{attempt}.parquet",
        "x.parquet",
        "x-{shard}-{attempt}-{worker}.parquet",
        "x-{shard}-{attempt",
        "",
    ],
)
@pytest.mark.parametrize("writer", ["write_parquet", "write_jsonl"])
def test_filename_template_must_stay_inside_the_output(tmp_path, template, writer):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="filename_template"):
        getattr(base(), writer)(str(out), filename_template=template)
    assert not out.exists() or all_files(out) == []


@pytest.mark.parametrize(
    ("template", "shown"),
    [
        ("x-{shard:>12}-{attempt}", "{shard:>12}"),
        ("x-{shard!r}-{attempt}", "{shard!r}"),
        ("x-{shard}-{attempt!s:>14}", "{attempt!s:>14}"),
        ("x-{shard:05}-{attempt}", "{shard:05}"),
    ],
)
@pytest.mark.parametrize("writer", ["write_parquet", "write_jsonl"])
def test_filename_template_refuses_format_specs_and_conversions(tmp_path, template, shown, writer):
    # each of these names files with spaces or quotes today
    template += ".parquet" if writer == "write_parquet" else ".jsonl"
    out = tmp_path / "out"
    with pytest.raises(ValueError) as caught:
        getattr(base(), writer)(str(out), filename_template=template)
    message = str(caught.value)
    assert f"filename_template {template!r} writes {shown}" in message
    assert "write the field as {" in message
    assert not out.exists()


def test_more_than_ten_thousand_shards_names_the_limit():
    with pytest.raises(ValueError, match=r"limit of 10000 shards"):
        mdr.from_items(range(20_000), items_per_shard=1).materialize()


def test_from_items_over_the_shard_limit_fails_when_called():
    # no plan, no run: building the pipeline is enough to be told, with the fix
    with pytest.raises(ValueError) as caught:
        mdr.from_items(range(10_001), items_per_shard=1)
    message = str(caught.value)
    assert "10001 items" in message and "10001 shards" in message
    assert "limit of 10000 shards" in message and "items_per_shard=2 or more" in message
    assert len(mdr.from_items(range(10_001), items_per_shard=2).plan()) == 5001
    assert len(mdr.from_items(range(10_000), items_per_shard=1).plan()) == 10_000


def test_dtypes_must_be_types():
    with pytest.raises(TypeError, match="dtype for column 'n'"):
        base().map(lambda r: {}, dtypes={"n": "int"})
    with pytest.raises(TypeError, match="dtypes must be a dict"):
        mdr.from_items([1], dtypes=[("n", mdr.datatype.int64())])


def test_unknown_writer_format(tmp_path):
    with pytest.raises(ValueError, match="unknown output format"):
        base().write("csv", str(tmp_path))


@pytest.mark.parametrize(
    ("column", "make", "shown"),
    [
        ("x", lambda bad: float("nan") if bad else 0.5, "nan"),
        ("x", lambda bad: float("inf") if bad else 0.5, "inf"),
        ("xs", lambda bad: [1.0, float("-inf") if bad else 2.0], "-inf"),
        ("pose", lambda bad: {"yaw": float("nan") if bad else 0.0}, "nan"),
    ],
)
def test_write_jsonl_names_a_value_json_cannot_hold(tmp_path, column, make, shown):
    """JSON has no NaN or infinity; the writer names the column, the line and the fix
    instead of writing a file strict readers reject, and leaves no data file behind."""
    out = tmp_path / "out"
    rows = [{"i": i, column: make(i == 1500)} for i in range(2000)]
    with pytest.raises(
        mdr.StageFailed, match=rf"column '{column}' of output line 1501 holds {shown}.*map step"
    ):
        mdr.from_items(rows, items_per_shard=2000).write_jsonl(str(out)).launch_local()
    assert [n for n in all_files(out) if not n.startswith("_refiner/")] == []
