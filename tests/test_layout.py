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
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "erroranalysis").rglob("*.py")
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
