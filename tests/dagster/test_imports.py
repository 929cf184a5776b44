"""The pinned Dagster set imports, and refiner_dagster's public API is what it says."""

from __future__ import annotations

import ast
import pathlib

import dagster as dg

import refiner_dagster


def test_dagster_aws_imports_with_the_pinned_dagster():
    import dagster_aws
    from dagster_aws.s3 import S3Resource

    assert dg.__version__ == "1.13.27"
    assert dagster_aws.__version__ == "0.29.27"
    assert issubclass(S3Resource, dg.ConfigurableResource)


def test_public_names_resolve():
    for name in refiner_dagster.__all__:
        assert getattr(refiner_dagster, name) is not None, name
    assert issubclass(refiner_dagster.RefinerBlobIOManager, dg.ConfigurableIOManager)
    assert issubclass(refiner_dagster.RefinerFileIOManager, dg.ConfigurableIOManager)


def test_public_names_are_few_and_each_documented():
    public = refiner_dagster.__all__
    assert len(public) <= 20, f"{len(public)} public names: {public}"
    assert len(set(public)) == len(public)
    overview = refiner_dagster.__doc__ or ""
    for name in public:
        assert f"`{name}`" in overview, f"{name} is not in refiner_dagster's overview docstring"
        assert (getattr(refiner_dagster, name).__doc__ or "").strip(), f"{name} has no docstring"
    # nothing but the listed names (and submodules) is importable from the package
    for name, value in vars(refiner_dagster).items():
        if not name.startswith("_") and not isinstance(value, type(refiner_dagster)):
            assert name in public or name == "annotations", name


def test_every_config_field_has_a_description():
    from refiner_dagster.fanout import FanoutConfig

    for cls in (
        refiner_dagster.RefinerBlobIOManager,
        refiner_dagster.RefinerFileIOManager,
        FanoutConfig,
    ):
        for name, field in cls.model_fields.items():
            assert field.description, f"{cls.__name__}.{name} has no description"


def test_no_private_dagster_imports():
    package = pathlib.Path(refiner_dagster.__file__).parent
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert not name.startswith("dagster._"), f"{path.name} imports {name}"


def test_docstring_examples_run(tmp_path, monkeypatch):
    import doctest
    import importlib

    monkeypatch.chdir(tmp_path)
    package = pathlib.Path(refiner_dagster.__file__).parent
    attempted = {}
    for path in sorted(package.glob("*.py")):
        if path.stem == "__init__":
            module = refiner_dagster
        else:
            module = importlib.import_module(f"refiner_dagster.{path.stem}")
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, f"{path.name}: {result.failed} docstring example(s) failed"
        attempted[path.stem] = result.attempted
    # the modules with public classes carry runnable examples
    for name in ("io_manager", "writer", "finalization", "checks", "sensors", "schedules"):
        assert attempted[name] > 0, name


LAZY_PROBE = """
import sys
import {module}
print(",".join(m for m in {heavy!r} if m in sys.modules))
"""


def imported_heavy_modules(module: str, heavy: tuple[str, ...]) -> list[str]:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", LAZY_PROBE.format(module=module, heavy=heavy)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [m for m in done.stdout.strip().split(",") if m]


def test_heavy_libraries_are_imported_where_they_are_used():
    # dagster-aws takes seconds to import: only an S3Resource brings it in.
    assert imported_heavy_modules("refiner_dagster", ("dagster_aws", "boto3", "fsspec")) == []
    assert (
        imported_heavy_modules(
            "refiner_core", ("dagster", "lance", "s3fs", "fsspec", "httpx", "pydantic", "click")
        )
        == []
    )
    # the demo code location has no S3 either
    assert imported_heavy_modules("refiner_dagster.demo.definitions", ("dagster_aws",)) == []
