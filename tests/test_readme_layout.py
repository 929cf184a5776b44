"""The README's "Layout" block matches the repository tree.

Granularity: the block lists every top-level entry of the repository (what git tracks,
except hidden names and README.md itself) and every Python package (a folder with an
``__init__.py``) of ``refiner_core`` and ``refiner_dagster``, nested by two spaces per
level. Modules and other folders (data, YAML) are left to the packages' docstrings, so the
block changes only when a package or a top-level entry is added, moved or removed.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PACKAGES = ("refiner_core", "refiner_dagster")
INDENT = 2
# Top-level names a run creates that git ignores; used only outside a git checkout.
GENERATED = {"README.md", "tmp", "demo_data", "test-artifacts"}


def layout_block(text: str) -> list[str]:
    """The lines of the first code block under ``## Layout``."""
    section = text.split("\n## Layout\n", 1)
    assert len(section) == 2, "README.md has no '## Layout' section"
    match = re.search(r"```\n(.*?)```", section[1].split("\n## ", 1)[0], flags=re.S)
    assert match, "the Layout section of README.md has no code block"
    return [line for line in match.group(1).splitlines() if line.strip()]


def listed_paths(lines: list[str]) -> list[str]:
    """Repository-relative paths of the block's entries: ``sinks/`` under
    ``refiner_core/`` is ``refiner_core/sinks/``. Folders keep their trailing ``/``."""
    parents: list[str] = []
    paths = []
    for number, line in enumerate(lines, 1):
        spaces = len(line) - len(line.lstrip(" "))
        depth, odd = divmod(spaces, INDENT)
        if odd or depth > len(parents):
            pytest.fail(
                f"README.md Layout line {number} {line.strip()!r} is indented {spaces} "
                f"spaces; nest entries {INDENT} spaces under a folder line ending in '/'"
            )
        name = line.split()[0]
        del parents[depth:]
        path = "".join(parents) + name
        paths.append(path)
        if name.endswith("/"):
            parents.append(name)
    return paths


def top_level_entries() -> set[str]:
    """What the repository holds at its root, folders with a trailing ``/``."""
    try:
        tracked = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        names = [p.name + ("/" if p.is_dir() else "") for p in ROOT.iterdir()]
    else:
        names = [f.split("/", 1)[0] + ("/" if "/" in f else "") for f in tracked]
    return {n for n in names if not n.startswith(".") and n.rstrip("/") not in GENERATED}


def packages() -> set[str]:
    """Every package folder of the two distributions' packages, with a trailing ``/``."""
    found = set()
    for package in PACKAGES:
        for init in (ROOT / package).rglob("__init__.py"):
            found.add(init.parent.relative_to(ROOT).as_posix() + "/")
    return found


def test_every_listed_path_exists():
    for path in listed_paths(layout_block(README.read_text())):
        target = ROOT / path
        kind = "folder" if path.endswith("/") else "file"
        exists = target.is_dir() if path.endswith("/") else target.is_file()
        assert exists, f"README.md Layout lists the {kind} {path}, which does not exist"


def test_every_package_and_top_level_entry_is_listed():
    listed = set(listed_paths(layout_block(README.read_text())))
    missing = sorted((packages() | top_level_entries()) - listed)
    assert not missing, (
        f"README.md Layout does not list {', '.join(missing)}: add a line for each, "
        f"nested {INDENT} spaces under its parent folder"
    )


def test_nesting_is_read_from_the_indentation():
    lines = ["a/        x", "  b/      y", "    c.py  z", "  d/      w", "e.txt     v"]
    assert listed_paths(lines) == ["a/", "a/b/", "a/b/c.py", "a/d/", "e.txt"]
