"""Asset writers judge the file that finally serves the bytes: URL chains and mounts under /dev."""

from __future__ import annotations

import os
import uuid
import zipfile
from pathlib import Path

import pytest

import refiner_core as mdr
from refiner_core.io.source_policy import RefusedSource, SourcePolicy

CONFIGS = {"file": mdr.FileAssetConfig, "blob": mdr.BlobAssetConfig}
CHAINS = [
    "simplecache::file:///proc/self/environ",
    "filecache::file:///proc/self/environ",
    "blockcache::file:///proc/self/environ",
    "simplecache::/proc/self/environ",
    "simplecache::filecache::file:///proc/self/environ",
    "simplecache::local:///proc/self/environ",
]


@pytest.fixture
def planted_environ() -> bytes:
    """The longest entry of this process's environment, which forked workers share."""
    with open("/proc/self/environ", "rb") as f:
        return max((e for e in f.read().split(b"\0") if b"=" in e), key=len)


def all_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


def write(tmp_path: Path, name: str, sources: list[str], config):
    rows = [{"i": i, "img": s} for i, s in enumerate(sources)]
    out = tmp_path / name
    stats = (
        mdr.from_items(rows, dtypes={"img": mdr.datatype.image_path()})
        .write_parquet(str(out), assets=config)
        .launch_local(rundir=str(tmp_path / f"run-{name}"))
    )
    return out, stats


@pytest.mark.parametrize("mode", sorted(CONFIGS))
@pytest.mark.parametrize("chain", CHAINS)
def test_chained_urls_into_proc_are_refused(chain, mode, tmp_path, planted_environ):
    good = tmp_path / "good.png"
    good.write_bytes(b"fine")
    for policy in ("error", "set_null", "drop_row"):
        with pytest.raises(mdr.StageFailed) as failed:
            write(tmp_path, policy, [str(good), chain], CONFIGS[mode](missing_policy=policy))
        message = str(failed.value)
        assert "column 'img', row 1" in message
        assert repr(chain) in message and "pseudo-filesystem" in message
        if (tmp_path / policy).exists():
            assert planted_environ not in all_bytes(tmp_path / policy)


def test_a_chained_url_to_a_good_file_is_copied(tmp_path):
    good = tmp_path / "good.png"
    good.write_bytes(b"frame bytes")
    out, stats = write(tmp_path, "out", [f"simplecache::file://{good}"], mdr.BlobAssetConfig())
    assert stats.summary.counters["assets_written"] == 1
    [row] = mdr.read_parquet(str(out)).materialize()
    assert mdr.read_blob(row["img"]) == b"frame bytes"


def test_unknown_wrappers_are_refused_unless_listed(tmp_path):
    archive = tmp_path / "frames.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("f0.png", b"zipped frame")
    url = f"zip://f0.png::file://{archive}"
    with pytest.raises(mdr.StageFailed, match="Add 'zip::' to allowed_sources") as failed:
        write(tmp_path, "refused", [url], mdr.BlobAssetConfig())
    assert repr(url) in str(failed.value)

    allowed = mdr.BlobAssetConfig(allowed_sources=["zip::", str(tmp_path)])
    out, stats = write(tmp_path, "allowed", [url], allowed)
    [row] = mdr.read_parquet(str(out)).materialize()
    assert mdr.read_blob(row["img"]) == b"zipped frame"

    # listing the wrapper does not open what lies inside it to everything
    with pytest.raises(RefusedSource, match="pseudo-filesystem"):
        SourcePolicy(["zip::", "/"]).check("zip://environ::file:///proc/self/environ")


@pytest.mark.parametrize(
    "url",
    ["simplecache:///proc/self/environ", "dir::/proc", "reference://x::file:///proc/self/environ"],
)
def test_wrappers_without_a_judged_target_are_refused(url):
    with pytest.raises(RefusedSource, match=r"'[a-z]+'"):
        SourcePolicy().check(url)


def test_wrapper_entries_in_allowed_sources_are_validated():
    assert mdr.BlobAssetConfig(allowed_sources=["zip::", "/data"]).allowed_sources == (
        "zip::",
        "/data",
    )
    for bad in (["s3://b/x::"], ["zip::file:///data"]):
        with pytest.raises(ValueError, match="wrapper protocol such as 'zip::'"):
            mdr.BlobAssetConfig(allowed_sources=bad)


@pytest.fixture
def shm_file():
    """A file on the tmpfs mounted at ``/dev/shm``, holding a stand-in secret."""
    if not os.path.ismount("/dev/shm"):
        pytest.skip("/dev/shm is not a mount of its own here")
    path = Path("/dev/shm") / f"refiner-test-{uuid.uuid4().hex}"
    path.write_bytes(b"SHM-SECRET-" + uuid.uuid4().hex.encode())
    yield path
    path.unlink()


@pytest.mark.parametrize("mode", sorted(CONFIGS))
def test_a_symlink_to_a_file_on_dev_shm_is_refused(mode, shm_file, tmp_path):
    link = tmp_path / "media" / "frame.png"
    link.parent.mkdir()
    link.symlink_to(shm_file)
    for name, source in [("direct", str(shm_file)), ("link", str(link))]:
        with pytest.raises(mdr.StageFailed, match="pseudo-filesystem") as failed:
            write(tmp_path, name, [source], CONFIGS[mode]())
        assert repr(source) in str(failed.value)
        if (tmp_path / name).exists():
            assert shm_file.read_bytes() not in all_bytes(tmp_path / name)
    # a folder listed under /dev/shm opens it, through the link too
    folder = SourcePolicy([str(shm_file.parent), str(tmp_path)])
    assert folder.check(str(link)) == str(shm_file)
