"""Readers given a versioned dataset folder read its published version only, or the
version asked for with ``version="v-..."``; any other is an error naming the versions on
disk. Parquet, JSONL and Lance, local disk and moto S3."""

from __future__ import annotations

import json
from typing import Any

import pytest
import s3fs

import refiner_core as mdr
from refiner_core.io import UnknownVersion
from tests.s3_fixtures import *  # noqa: F403

pytestmark = pytest.mark.timeout(180)

READERS = {"parquet": mdr.read_parquet, "jsonl": mdr.read_jsonl, "lance": mdr.read_lance}


@pytest.fixture(params=["local", "s3"])
def place(request, tmp_path) -> tuple[str, dict[str, Any] | None]:
    """``(url, storage_options)`` of a fresh folder for a dataset."""
    if request.param == "local":
        return str(tmp_path / "episodes"), None
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/episodes", request.getfixturevalue("s3_storage_options")


def _put(url: str, options: dict[str, Any] | None, relative: str, record: dict) -> None:
    """Write a JSON record the way refiner_dagster's publishing does (not through readers)."""
    data = json.dumps(record).encode()
    if options is None:
        import pathlib

        path = pathlib.Path(url, relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    else:
        s3fs.S3FileSystem(**options).pipe_file(f"{url.removeprefix('s3://')}/{relative}", data)


def _version(url: str, options, fmt: str, name: str, ids: range, state: str) -> None:
    """A finalized version folder ``<url>/<name>`` holding rows ``ids``, and its record."""
    rows = [{"i": i} for i in ids]
    mdr.from_items(rows, items_per_shard=2).write(
        fmt, f"{url}/{name}", storage_options=options
    ).launch_local()
    _put(url, options, f"_versions/{name}.json", {"state": state, "format": fmt})


def _publish(url: str, options, name: str) -> None:
    _put(url, options, "_current.json", {"version": name, "url": f"{url}/{name}"})


def _ids(pipeline: mdr.Pipeline) -> list[int]:
    return sorted(row["i"] for row in pipeline.iter_rows())


@pytest.fixture(params=sorted(READERS))
def dataset(request, place) -> tuple[str, dict[str, Any] | None, str]:
    """A dataset folder with published ``v-aaa`` (rows 0-3) and, beside it, ``v-bbb``
    (rows 10-14): finalized but never published, as a failed audit leaves it."""
    url, options = place
    fmt = request.param
    _version(url, options, fmt, "v-aaa", range(4), "published")
    _version(url, options, fmt, "v-bbb", range(10, 15), "written")
    _publish(url, options, "v-aaa")
    return url, options, fmt


def test_a_dataset_folder_reads_as_its_published_version_only(dataset):
    url, options, fmt = dataset
    assert _ids(READERS[fmt](url, storage_options=options)) == [0, 1, 2, 3]


def test_version_reads_another_version_on_disk(dataset):
    url, options, fmt = dataset
    assert _ids(READERS[fmt](url, version="v-bbb", storage_options=options)) == [*range(10, 15)]
    assert _ids(READERS[fmt](url, version="v-aaa", storage_options=options)) == [0, 1, 2, 3]


def test_an_unknown_version_names_the_versions_on_disk(dataset):
    url, options, fmt = dataset
    with pytest.raises(UnknownVersion) as caught:
        READERS[fmt](url, version="v-ccc", storage_options=options).plan()
    message = str(caught.value)
    assert f"read_{fmt}" in message and url in message and "'v-ccc'" in message
    assert "v-aaa (published), v-bbb" in message


def test_a_dataset_without_a_published_version_is_an_error(tmp_path):
    url = str(tmp_path / "episodes")
    _version(url, None, "parquet", "v-aaa", range(3), "written")
    with pytest.raises(UnknownVersion, match=r"no published version .*versions on disk: v-aaa"):
        mdr.read_parquet(url).plan()
    assert _ids(mdr.read_parquet(url, version="v-aaa")) == [0, 1, 2]


def test_a_pointer_to_a_version_gone_from_disk_is_an_error(tmp_path):
    url = str(tmp_path / "episodes")
    _version(url, None, "jsonl", "v-aaa", range(3), "written")
    _publish(url, None, "v-gone")
    with pytest.raises(UnknownVersion, match=r"publishes v-gone, which is not on disk"):
        mdr.read_jsonl(url).plan()


def test_partition_folders_below_a_folder_read_as_their_published_versions(tmp_path):
    root = tmp_path / "episodes"
    for partition, first in (("2024-01-01", 0), ("2024-01-02", 100)):
        url = str(root / partition)
        _version(url, None, "parquet", "v-aaa", range(first, first + 2), "published")
        _version(url, None, "parquet", "v-bbb", range(first + 50, first + 52), "written")
        _publish(url, None, "v-aaa")
    assert _ids(mdr.read_parquet(str(root))) == [0, 1, 100, 101]


def test_version_on_a_plain_folder_or_file_is_refused(tmp_path):
    out = str(tmp_path / "plain")
    mdr.from_items([{"i": 1}]).write_parquet(out).launch_local()
    with pytest.raises(UnknownVersion, match="not a versioned dataset folder"):
        mdr.read_parquet(out, version="v-aaa").plan()
    with pytest.raises(ValueError, match="is not a dataset version"):
        mdr.read_parquet(out, version="latest")
    with pytest.raises(ValueError, match="is not a dataset version"):
        mdr.read_lance(out, version="latest")
