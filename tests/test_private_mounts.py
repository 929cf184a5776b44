"""tests/private_mounts.py: bind mounts that only the wrapped command sees, and clear
failures where a machine cannot make them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.private_mounts import (
    HOW_TO_ENABLE,
    Bind,
    PrivateMountsUnavailable,
    check_available,
    run_with_binds,
    unshare_command,
)


def test_a_bind_is_seen_by_the_command_only(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    source.mkdir()
    target.mkdir()
    (source / "hello.txt").write_text("from the test's folder")

    done = run_with_binds(
        ["sh", "-c", f"cat {target}/hello.txt && touch {target}/made"], [Bind(source, target)]
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout == "from the test's folder"
    assert list(target.iterdir()) == []  # outside the namespace nothing was mounted there
    assert sorted(p.name for p in source.iterdir()) == ["hello.txt", "made"]


def test_a_read_only_bind_refuses_writes(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    source.mkdir()
    target.mkdir()

    done = run_with_binds(["touch", f"{target}/x"], [Bind(source, target, read_only=True)])

    assert done.returncode != 0
    assert "Read-only file system" in done.stderr
    assert list(source.iterdir()) == []


def test_a_target_that_is_not_a_folder_is_named(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "a-file"
    source.mkdir()
    target.write_text("not a folder")

    with pytest.raises(PrivateMountsUnavailable, match=rf"{target} exists and is not a folder"):
        run_with_binds(["true"], [Bind(source, target)])


def test_missing_tools_are_named_with_the_package_to_install(tmp_path: Path) -> None:
    with pytest.raises(PrivateMountsUnavailable, match="unshare and mount not found.*util-linux"):
        unshare_command(search_path=str(tmp_path))


def test_a_namespace_that_cannot_start_says_how_to_allow_it() -> None:
    with pytest.raises(PrivateMountsUnavailable) as caught:
        check_available(("false",))
    assert "no private mount namespace" in str(caught.value)
    assert HOW_TO_ENABLE in str(caught.value)
