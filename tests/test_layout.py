"""The layout that shows the pipeline stays true: the import-linter contracts hold, every package ships, no
module grows past what a reader can hold, and old import paths still work (with a warning) for one release."""

from __future__ import annotations

import subprocess
import sys
import warnings
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


@pytest.mark.parametrize("old, name", [("erroranalysis.runs", "Run"), ("erroranalysis.cluster_stage", "cluster_run"),
                                       ("erroranalysis.pipeline", "run_checkpoint"),
                                       ("erroranalysis.taxonomy_apply", "apply_taxonomy"),
                                       ("erroranalysis.checkers", "run_checks"),
                                       ("erroranalysis.inference", "output_table")])
def test_old_import_paths_work_with_a_deprecation_warning(old, name):
    import importlib

    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
        assert callable(getattr(module, name)) or isinstance(getattr(module, name), type)
    assert any(issubclass(w.category, DeprecationWarning) and old in str(w.message) for w in caught)
