"""The s3fs/fsspec internals refiner relies on are listed, checked, and nothing else is used.

If an s3fs or fsspec release changes one of them, ``test_the_installed_releases_have_every_hook``
fails with the hook's name; the other tests prove each check notices such a change.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest
import s3fs.core

from refiner_core.io import DataFolder
from refiner_core.io.upstream import HOOKS, UpstreamChangedError, check_hooks

ROOT = pathlib.Path(__file__).resolve().parents[2]
THIRD_PARTY = ("s3fs", "fsspec", "botocore", "aiobotocore", "lance", "pyarrow")


def test_the_installed_releases_have_every_hook():
    check_hooks()


def _stock_s3file():
    return getattr(s3fs.core.S3File, "_refiner_stock_class", s3fs.core.S3File)


@pytest.mark.parametrize(
    ("owner", "name", "named"),
    [
        (_stock_s3file, "_abort_mpu", "_abort_mpu"),
        (_stock_s3file, "_initiate_upload", "_initiate_upload"),
        (_stock_s3file, "_upload_chunk", "_upload_chunk"),
        (_stock_s3file, "discard", "discard"),
        (lambda: s3fs.S3FileSystem, "_call_s3", "_call_s3"),
        (lambda: s3fs.S3FileSystem, "get_s3", "get_s3"),
    ],
)
def test_a_missing_method_is_named(monkeypatch, owner, name, named):
    cls = owner()
    holder = next(klass for klass in cls.__mro__ if name in klass.__dict__)
    monkeypatch.delattr(holder, name)
    with pytest.raises(UpstreamChangedError, match=named) as caught:
        check_hooks()
    assert s3fs.__version__ in str(caught.value)
    assert "pinned" in str(caught.value)


def test_a_changed_signature_is_named(monkeypatch):
    def _upload_chunk(self, last=False):  # the parameter renamed
        return False

    monkeypatch.setattr(_stock_s3file(), "_upload_chunk", _upload_chunk)
    with pytest.raises(UpstreamChangedError, match=r"_upload_chunk.*no parameter final"):
        check_hooks()


def test_a_call_s3_that_is_no_longer_a_coroutine_is_named(monkeypatch):
    def _call_s3(self, method, *args, **kwargs):
        return None

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", _call_s3)
    with pytest.raises(UpstreamChangedError, match="_call_s3 is no longer a coroutine"):
        check_hooks()


def test_changed_event_loop_slots_are_named(monkeypatch):
    import fsspec.asyn

    monkeypatch.setattr(fsspec.asyn, "iothread", None)
    with pytest.raises(UpstreamChangedError, match="fsspec.asyn.iothread"):
        check_hooks()


def test_installing_the_writer_on_a_changed_s3fs_fails_before_any_upload():
    script = (
        "import s3fs.core\n"
        "del s3fs.core.S3File._abort_mpu\n"
        "from refiner_core.io.s3_multipart import install\n"
        "install()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "UpstreamChangedError" in done.stderr
    assert "_abort_mpu" in done.stderr


def _private_third_party_uses(path: pathlib.Path) -> set[str]:
    """``name._attr`` uses where ``name`` is a third-party module or class imported by
    the file, or a filesystem object (``fs``, ``self.fs``, ``x.fs``)."""
    tree = ast.parse(path.read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in THIRD_PARTY:
                    imported.add((alias.asname or alias.name).split(".")[0])
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.split(".")[0] in THIRD_PARTY
        ):
            imported.update(alias.asname or alias.name for alias in node.names)
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        attr = node.attr
        if not attr.startswith("_") or attr.startswith("__"):
            continue
        base = node.value
        base_name = base.id if isinstance(base, ast.Name) else None
        while isinstance(base, ast.Attribute):
            base = base.value
        root = base.id if isinstance(base, ast.Name) else None
        is_fs = base_name == "fs" or (
            isinstance(node.value, ast.Attribute) and node.value.attr == "fs"
        )
        if is_fs or (root in imported):
            found.add(attr)
    return found


def test_no_private_third_party_name_is_used_outside_the_listed_hooks():
    listed = {part for hook in HOOKS for part in hook.name.replace("/", " ").split()}
    listed |= {segment for name in list(listed) for segment in name.split(".")}
    unlisted = {}
    for path in sorted((ROOT / "refiner_core").rglob("*.py")) + sorted(
        (ROOT / "refiner_dagster").rglob("*.py")
    ):
        uses = _private_third_party_uses(path) - listed
        if uses:
            unlisted[str(path.relative_to(ROOT))] = sorted(uses)
    assert not unlisted, (
        f"private s3fs/fsspec/botocore/lance/pyarrow names used but not listed in "
        f"refiner_core/io/upstream.py HOOKS: {unlisted}"
    )


def test_the_scan_sees_a_private_filesystem_call(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import fsspec\nfs = fsspec.filesystem('file')\nfs._parent('/a/b')\n")
    assert _private_third_party_uses(sample) == {"_parent"}


@pytest.mark.parametrize("url", ["memory://refiner-atomic/out", "local"])
def test_a_failed_atomic_write_leaves_nothing_and_a_good_one_lands_whole(url, tmp_path):
    folder = DataFolder(str(tmp_path / "out") if url == "local" else url)
    with pytest.raises(RuntimeError, match="boom"), folder.open_atomic("part-0.bin") as f:
        f.write(b"half of it")
        raise RuntimeError("boom")
    assert not folder.exists("part-0.bin")
    assert folder.find() == []

    with folder.open_atomic("nested/part-1.bin") as f:
        f.write(b"all of it")
    assert folder.read_bytes("nested/part-1.bin") == b"all of it"
    assert folder.find() == ["nested/part-1.bin"]
    folder.rm("nested", recursive=True)
