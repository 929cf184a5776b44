"""Both packages type-check cleanly under the repository's mypy configuration, and say so.

The configuration lives in pyproject.toml ([tool.mypy]); this test runs mypy exactly as a
developer would (``mypy`` from the repository root) so CI and local runs agree.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parent.parent
_PACKAGES = ("refiner_core", "refiner_dagster")


def test_mypy_reports_no_errors() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(_ROOT / "pyproject.toml")],
        cwd=_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    report = (result.stdout + result.stderr).strip()
    if result.returncode != 0 or not report.startswith("Success: no issues found"):
        pytest.fail(
            "mypy found type errors; fix their causes (a `# type: ignore[code]` only where a "
            f"third-party stub is wrong, with the reason on the same line):\n{report}",
            pytrace=False,
        )


def test_mypy_checks_both_packages() -> None:
    config = tomllib.loads((_ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert sorted(config["packages"]) == sorted(_PACKAGES)
    assert config["warn_unused_ignores"] is True
    assert "ignore_missing_imports" not in config, (
        "ignore_missing_imports belongs in a per-module override naming the untyped package"
    )


@pytest.mark.parametrize("package", _PACKAGES)
def test_package_ships_py_typed_marker(package: str) -> None:
    marker = resources.files(package).joinpath("py.typed")
    assert marker.is_file(), f"{package}/py.typed is missing: users' type checkers would skip it"
