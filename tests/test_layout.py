"""The layout that shows the pipeline stays true: the import-linter contracts hold, every package ships, no
module grows past what a reader can hold, and no core imports a module where the linter cannot see it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 420


def test_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_every_package_is_in_the_wheel():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "erroranalysis").rglob("__init__.py")}
    found |= {"erroranalysis_ui." + ".".join(p.parent.relative_to(ROOT / "ui").parts)
              for p in (ROOT / "ui").rglob("__init__.py") if p.parent != ROOT / "ui"} | {"erroranalysis_ui"}
    assert found <= listed, f"packages missing from pyproject.toml: {sorted(found - listed)}"


def test_no_module_is_too_long_to_read():
    long = {str(p.relative_to(ROOT)): n for folder in ("erroranalysis", "ui") for p in (ROOT / folder).rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"split these modules (over {MAX_LINES} lines): {long}"


def _core_files() -> list[Path]:
    """The files of the pure cores, as the first import-linter contract names them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = config["tool"]["importlinter"]["contracts"][0]
    assert "pure cores" in contract["name"]
    found = []
    for module in contract["source_modules"]:
        path = ROOT.joinpath(*module.split("."))
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]
    assert all(p.is_file() for p in found)
    return found


def _dynamic_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """Imports the linter cannot see: importlib (but importlib.metadata, which reads versions) and __import__."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names
                      if a.name.split(".")[0] == "importlib" and a.name != "importlib.metadata"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "importlib":
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names
                      if node.module != "importlib.metadata" and (node.module, a.name) != ("importlib", "metadata")]
        elif isinstance(node, ast.Name) and node.id == "__import__":
            found.append((node.lineno, "__import__"))
    return found


def test_the_cores_import_nothing_behind_the_linters_back():
    """A core that reaches a module through importlib hides an edge the contracts forbid."""
    found = {f"{p.relative_to(ROOT)}:{line}": what for p in _core_files()
             for line, what in _dynamic_imports(ast.parse(p.read_text(encoding="utf-8")))}
    assert not found, f"import these modules with an import statement: {found}"


def test_the_dynamic_import_scan_finds_each_form():
    source = ("import importlib\nfrom importlib import import_module\nimport importlib.util\n__import__('os')\n"
              "from importlib import metadata\nimport importlib.metadata\n")
    assert [line for line, _ in _dynamic_imports(ast.parse(source))] == [1, 2, 3, 4]


def test_the_old_flat_modules_are_gone():
    """0.2 removed the 0.1 import paths (CHANGELOG.md): nothing answers for them, not even with a warning."""
    import importlib

    for old in ("erroranalysis.runs", "erroranalysis.cluster_stage", "erroranalysis.pipeline",
                "erroranalysis.taxonomy_apply", "erroranalysis.checkers", "erroranalysis.inference"):
        sys.modules.pop(old, None)
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
        assert f"`{old}`" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), f"CHANGELOG.md: say where {old} went"


# -- private names ---------------------------------------------------------------------------------------------------

PACKAGES = {"erroranalysis": ROOT / "erroranalysis", "erroranalysis_ui": ROOT / "ui"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_file(module: str) -> Path | None:
    """The file of one of our modules (a package's __init__.py), or None for anything else."""
    top, _, rest = module.partition(".")
    if top not in PACKAGES:
        return None
    base = PACKAGES[top].joinpath(*rest.split(".")) if rest else PACKAGES[top]
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _module_name(path: Path) -> tuple[str, str]:
    """(module, package) of one of our files: erroranalysis/cluster/_fit.py -> erroranalysis.cluster._fit, in
    package erroranalysis.cluster; a package's __init__ is in the package itself."""
    for top, folder in PACKAGES.items():
        if path.is_relative_to(folder):
            parts = [top, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
                return ".".join(parts), ".".join(parts)
            return ".".join(parts), ".".join(parts[:-1])
    raise ValueError(path)


def _reaches_private_module(module: str, package: str) -> bool:
    """A module path through a private module (`erroranalysis.cluster._naming`) from outside its package."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if _private(part) and ".".join(parts[:i]) != package:
            return True
    return False


def private_uses(source: str, path: Path) -> list[str]:
    """Where a module uses another module's private name: `from m import _x`, `m._x` on an imported module of ours,
    or a private module (`pkg._mod`) imported from outside its package."""
    me, package = _module_name(path)
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # local name -> one of our modules it is bound to
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _module_file(a.name) and _reaches_private_module(a.name, package):
                    found.append(f"{node.lineno}: import {a.name}")
                if a.asname:
                    modules[a.asname] = a.name
                else:
                    modules[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = (me if path.name == "__init__.py" else package).split(".")
                base = ".".join(anchor[:len(anchor) - node.level + 1] + ([node.module] if node.module else []))
            if _module_file(base) is None:
                continue
            if _reaches_private_module(base, package):
                found.append(f"{node.lineno}: from {base} import ...")
            for a in node.names:
                full = f"{base}.{a.name}"
                if _module_file(full) is not None:  # a module of ours
                    modules[a.asname or a.name] = full
                    if _private(a.name) and base != package:
                        found.append(f"{node.lineno}: from {base} import {a.name}")
                elif _private(a.name) and base != me:
                    found.append(f"{node.lineno}: from {base} import {a.name}")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                and node.value.id in modules and modules[node.value.id] != me):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names():
    """A private name (`_x`) is private to its module, a private module (`cluster._fit`) to its package: what
    another module needs is public, or the concept is split where it splits."""
    found = {}
    for folder in PACKAGES.values():
        for path in sorted(folder.rglob("*.py")):
            uses = private_uses(path.read_text(encoding="utf-8"), path)
            if uses:
                found[str(path.relative_to(ROOT))] = uses
    assert not found, f"private names used across modules: {found}"


@pytest.mark.parametrize("source, where, expected", [
    ("from erroranalysis.labels.taxonomy import _num\n", "erroranalysis/stages/export.py", 1),
    ("from erroranalysis.labels.taxonomy import to_json\n", "erroranalysis/stages/export.py", 0),
    ("from erroranalysis.cluster._naming import short_text\n", "erroranalysis/stages/cluster.py", 1),
    ("from erroranalysis.cluster._naming import short_text\n", "erroranalysis/cluster/_fit.py", 0),
    ("from erroranalysis.cluster._naming import short_text\n", "erroranalysis/cluster/__init__.py", 0),
    ("from erroranalysis.cluster import _naming\n", "erroranalysis/stages/cluster.py", 1),
    ("from erroranalysis.cluster._neighbors import _vote\n", "erroranalysis/cluster/_fit.py", 1),
    ("from . import _naming\n", "erroranalysis/cluster/_fit.py", 0),
    ("from erroranalysis_ui.eaui import charts\ncharts._html('x')\n", "ui/eaui/timeline.py", 1),
    ("from erroranalysis_ui.eaui import charts\ncharts.snippet('x')\n", "ui/eaui/timeline.py", 0),
    ("import erroranalysis.cluster._fit as fit\n", "erroranalysis/stages/cluster.py", 1),
    ("def f(run):\n    return run._write\n", "erroranalysis/rundir/run.py", 0),
])
def test_the_private_name_scan_finds_each_form(source, where, expected):
    assert len(private_uses(source, ROOT / where)) == expected


def test_the_package_root_shows_the_pipeline():
    """The root holds the registry only; everything else lives in the folder of the layer it belongs to."""
    files = sorted(p.name for p in (ROOT / "erroranalysis").glob("*.py"))
    assert files == ["__init__.py", "tasks.py"], f"move these into their layer's folder: {files}"


def test_moved_public_paths_still_import_with_a_warning():
    """`from erroranalysis.data import DataOptions` (the 0.2 docs) works for one more release, with a warning naming
    the new place, and gives the very same class."""
    import importlib

    from erroranalysis.sources.table import DataOptions

    for old, new in (("erroranalysis.data", "erroranalysis.sources.table"),
                     ("erroranalysis.generations", "erroranalysis.sources.generations")):
        sys.modules.pop(old, None)
        with pytest.warns(DeprecationWarning, match=new):
            module = importlib.import_module(old)
        assert module is importlib.import_module(new)
    assert sys.modules["erroranalysis.data"].DataOptions is DataOptions


def test_no_import_circles_even_inside_a_folder():
    """Modules that import each other (lazily too) cannot be read, tested or moved one at a time: the shared part
    goes down into a module both import (checklist/memorize.py, labels/backup_names.py)."""
    import grimp

    graph = grimp.build_graph("erroranalysis", "erroranalysis_ui", cache_dir=None)
    circles = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.chain_exists(importer=imported, imported=module):
                circles.add(tuple(sorted((module, imported))))
    assert not circles, f"import circles: {sorted(circles)}"
