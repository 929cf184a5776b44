"""The packages import each other only in the directions the architecture promises.

Imports are read from the source (``ast``), function-level ones included, so a
violation fails here before it can hide behind a lazy import:

- ``refiner_core`` never imports Dagster (or ``refiner_dagster``);
- the layers of ``refiner_core`` point one way: ``pipeline`` -> ``execution`` ->
  ``sinks`` / ``sources`` -> the shared modules (``lance``, ``io``, ``manifests``,
  ``blocks``, ``errors``, ...); ``sources`` and ``sinks`` never import each other;
- ``execution`` may import the sink contract (``sinks.protocol``), nothing else of ``sinks``;
- ``refiner_dagster`` uses only ``refiner_core.__all__``, the submodules listed in
  ``refiner_core.PUBLIC_MODULES`` and the one seam ``refiner_core.integration``, and no
  ``_`` name or ``_``-prefixed module of them.
"""

from __future__ import annotations

import ast
import pathlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import refiner_core

ROOT = pathlib.Path(refiner_core.__file__).parent.parent
SHARED = ("lance", "io", "manifests", "blocks", "errors", "row", "datatype", "validation")
SEAM = "refiner_core.integration"
# modules a package may import although their package is forbidden to it: contracts
CONTRACTS = {"execution": ("refiner_core.sinks.protocol",)}
# package -> packages of refiner_core it must never import
FORBIDDEN = {
    "sources": ("sinks", "execution", "pipeline"),
    "sinks": ("sources", "execution", "pipeline"),
    "execution": ("pipeline", "sinks"),
    **{name: ("sources", "sinks", "execution", "pipeline") for name in SHARED},
}


@dataclass(frozen=True)
class Import:
    """One imported module (and the names taken from it), where it appears."""

    path: pathlib.Path
    line: int
    module: str
    names: tuple[str, ...] = ()

    def __str__(self) -> str:
        taken = f" ({', '.join(self.names)})" if self.names else ""
        return f"{self.path.relative_to(ROOT)}:{self.line} imports {self.module}{taken}"


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: pathlib.Path) -> Iterator[Import]:
    """Every import in ``path``, relative ones resolved to absolute module names."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(path, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            yield Import(path, node.lineno, module, tuple(a.name for a in node.names))


def files(package: str) -> list[pathlib.Path]:
    return sorted((ROOT / package).rglob("*.py"))


def layer(module: str) -> str | None:
    """The refiner_core package (or shared module) ``module`` belongs to."""
    parts = module.split(".")
    return parts[1] if parts[0] == "refiner_core" and len(parts) > 1 else None


def core_violations() -> list[str]:
    found = []
    for path in files("refiner_core"):
        own = layer(module_name(path))
        for imp in imports_of(path):
            top = imp.module.split(".")[0]
            if top in ("dagster", "refiner_dagster") or top.startswith("dagster_"):
                found.append(f"{imp}: refiner_core never imports Dagster")
                continue
            # ``from ..sinks import make_sink`` in pipeline/ names the package itself
            targets = [imp.module]
            if imp.module == "refiner_core":
                targets = [f"refiner_core.{n}" for n in imp.names]
            for target in targets:
                other = layer(target)
                if target in CONTRACTS.get(own or "", ()):
                    continue
                if own in FORBIDDEN and other in FORBIDDEN[own]:
                    found.append(f"{imp}: {own} must not import {other}")
    return found


def dagster_violations() -> list[str]:
    """Imports of refiner_core internals by refiner_dagster (other than through the seam),
    and ``mdr.<name>`` uses of names outside ``refiner_core.__all__``."""
    public_names = set(refiner_core.__all__) | set(refiner_core.PUBLIC_MODULES) | {"integration"}
    public_modules = {f"refiner_core.{m}" for m in refiner_core.PUBLIC_MODULES} | {SEAM}
    found = []
    for path in files("refiner_dagster"):
        tree = ast.parse(path.read_text(), str(path))
        aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "refiner_core":
                        aliases.add(alias.asname or alias.name)
        for imp in imports_of(path):
            if imp.module != "refiner_core" and not imp.module.startswith("refiner_core."):
                continue
            if imp.module == "refiner_core":
                private = [n for n in imp.names if n not in public_names]
                if private:
                    found.append(f"{imp}: {private} not in refiner_core.__all__")
            elif imp.module not in public_modules:
                found.append(
                    f"{imp}: not a public module (refiner_core.PUBLIC_MODULES) nor the seam {SEAM}"
                )
            else:
                private = [n for n in imp.names if n.startswith("_")]
                if private:
                    found.append(f"{imp}: {private} are private names")
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr not in public_names
            ):
                found.append(
                    f"{path.relative_to(ROOT)}:{node.lineno} uses {node.value.id}.{node.attr}: "
                    "not in refiner_core.__all__"
                )
    return found


def test_refiner_core_layers_point_one_way_and_never_reach_dagster():
    violations = core_violations()
    assert not violations, "layering violations:\n" + "\n".join(violations)


def test_refiner_dagster_uses_only_the_public_api_of_refiner_core():
    violations = dagster_violations()
    assert not violations, "refiner_dagster reaches into refiner_core:\n" + "\n".join(violations)


def test_public_modules_and_names_exist():
    import importlib

    for name in refiner_core.PUBLIC_MODULES:
        importlib.import_module(f"refiner_core.{name}")
    for name in refiner_core.__all__:
        assert getattr(refiner_core, name) is not None, name


def test_the_public_surface_is_small():
    """Only modules a user imports are public; the engine's ids, paths and reduction
    helpers are not, and the seam holds only what an integration needs."""
    import importlib

    import refiner_core.integration as seam

    assert set(refiner_core.PUBLIC_MODULES) <= {
        "datatype",
        "errors",
        "inference",
        "io",
        "manifests",
        "vocabulary",
    }
    for name in refiner_core.PUBLIC_MODULES:
        module = importlib.import_module(f"refiner_core.{name}")
        exported = getattr(module, "__all__", ())
        assert not [n for n in exported if n.startswith("_")], name
    internals = {"attempt_key", "parse_attempt_key", "new_attempt_id", "choose_committed"}
    assert not internals & set(refiner_core.manifests.__all__)
    assert not internals & set(dir(refiner_core.manifests))
    assert len(seam.__all__) <= 6, seam.__all__


def test_the_checks_see_violations(tmp_path, monkeypatch):
    """Each rule fires on a file that breaks it (the checks are not vacuous)."""
    fake = tmp_path / "refiner_core"
    (fake / "sources").mkdir(parents=True)
    (fake / "sources" / "bad.py").write_text(
        "from ..sinks.parquet import ParquetSink\n"
        "def later():\n    import dagster\n    from refiner_core.pipeline import sequence\n"
    )
    (fake / "execution").mkdir()
    (fake / "execution" / "bad.py").write_text(
        "from ..sinks.protocol import Sink\nfrom ..sinks.files import FileSink\n"
    )
    (fake / "lance").mkdir()
    (fake / "lance" / "bad.py").write_text("from ..execution import launcher\n")
    dagster_side = tmp_path / "refiner_dagster"
    dagster_side.mkdir()
    (dagster_side / "bad.py").write_text(
        "import refiner_core as mdr\n"
        "from refiner_core import Pipeline, ParquetSource\n"
        "from refiner_core.execution.launcher import launch\n"
        "from refiner_core.manifests import AttemptManifest\n"
        "from refiner_core.integration import finalize_output\n"
        "from refiner_core.manifests._attempts import attempt_key\n"
        "from refiner_core.io import _private\n"
        "x = mdr.sources\n"
        "y = mdr.read_parquet\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    core = core_violations()
    assert any("sources/bad.py:1" in v and "sources must not import sinks" in v for v in core)
    assert any("sources/bad.py:3" in v and "never imports Dagster" in v for v in core)
    assert any("sources/bad.py:4" in v and "must not import pipeline" in v for v in core)
    assert any("lance/bad.py:1" in v and "lance must not import execution" in v for v in core)
    assert any("execution/bad.py:2" in v and "must not import sinks" in v for v in core)
    assert not any("execution/bad.py:1" in v for v in core)
    dagster = dagster_violations()
    assert any("['ParquetSource'] not in refiner_core.__all__" in v for v in dagster)
    assert any(
        "refiner_core.execution.launcher" in v and "not a public module" in v for v in dagster
    )
    assert any("uses mdr.sources" in v for v in dagster)
    assert any("refiner_core.manifests._attempts" in v and "nor the seam" in v for v in dagster)
    assert any("['_private'] are private names" in v for v in dagster)
    assert len(dagster) == 5, dagster
