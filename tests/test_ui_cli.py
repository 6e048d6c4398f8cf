"""`erroranalysis ui`: argument checks and the Streamlit command it runs; the app's own argument parsing."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from erroranalysis.cli import ui as ui_cli
from erroranalysis.cli.app import app
from ui_fixtures import make_run

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ui"))
from eaui import config  # noqa: E402


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("ws")
    make_run(root / "news", n=40, n_failures=8, with_clusters=False)
    return root


def test_app_file_exists():
    assert ui_cli.app_path().is_file()
    assert ui_cli.app_path().parent.name == "ui"


@pytest.mark.parametrize("args, message", [
    (["/no/such/folder"], "no such folder"),
    (["--port", "0"], "--port=0 is invalid"),
    (["--port", "70000"], "--port=70000 is invalid"),
])
def test_bad_arguments_are_one_line_errors(args, message, workspace):
    argv = ["ui"] + (args if args[0].startswith("/") else [str(workspace)] + args)
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_open_must_be_a_run_inside_the_folder(workspace, tmp_path):
    other = make_run(tmp_path / "elsewhere", n=20, n_failures=4, with_clusters=False)
    result = CliRunner().invoke(app, ["ui", str(workspace), "--open", str(other.path)])
    assert result.exit_code == 2 and "not inside the runs folder" in result.output
    result = CliRunner().invoke(app, ["ui", str(workspace), "--open", "nope"])
    assert result.exit_code == 2 and "not a run directory" in result.output


def test_a_busy_port_is_reported(workspace):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = CliRunner().invoke(app, ["ui", str(workspace), "--port", str(port)])
    assert result.exit_code == 2 and f"port {port} on 127.0.0.1 is in use" in result.output


def test_streamlit_command_binds_localhost_and_passes_the_options(workspace):
    cmd = ui_cli.streamlit_command(ui_cli.app_path(), workspace, port=8600, host="127.0.0.1", user="ann",
                                   open_run="news", labels_db=workspace / "l.sqlite")
    assert cmd[:4] == [sys.executable, "-m", "streamlit", "run"]
    opts = dict(zip(cmd[5::2], cmd[6::2]))
    assert opts["--server.port"] == "8600" and opts["--server.address"] == "127.0.0.1"
    assert opts["--server.headless"] == "true" and opts["--browser.gatherUsageStats"] == "false"
    assert cmd[cmd.index("--") + 1:] == [str(workspace), "--user", "ann", "--open", "news", "--labels-db",
                                         str(workspace / "l.sqlite")]


def test_the_ui_command_runs_streamlit_with_the_run_opened(workspace, monkeypatch):
    seen = {}

    def fake_call(cmd):
        seen["cmd"] = cmd
        return 0

    import subprocess

    monkeypatch.setattr(subprocess, "call", fake_call)
    result = CliRunner().invoke(app, ["ui", str(workspace / "news"), "--port", "8599", "--user", "ann"])
    assert result.exit_code == 0, result.output
    assert "erroranalysis app: http://localhost:8599/?run=news" in result.output
    cmd = seen["cmd"]
    assert cmd[cmd.index("--") + 1:] == [str(workspace.resolve()), "--user", "ann", "--open", "news"]


def test_app_config_from_arguments_and_environment(workspace, tmp_path):
    cfg = config.parse([str(workspace / "news"), "--user", "ann"], env={})
    assert cfg.runs_root == workspace.resolve() and cfg.open_run == "news" and cfg.user == "ann"
    assert cfg.labels_db == workspace.resolve() / "labels.sqlite" and cfg.problem is None
    cfg = config.parse([], env={"ERRORANALYSIS_RUNS": str(workspace), "ERRORANALYSIS_OPEN": "news",
                                "ERRORANALYSIS_LABELS_DB": str(tmp_path / "x.sqlite"), "ERRORANALYSIS_USER": "bo"})
    assert (cfg.open_run, cfg.user, cfg.labels_db) == ("news", "bo", (tmp_path / "x.sqlite").resolve())
    cfg = config.parse([str(tmp_path / "missing")], env={})
    assert "no such folder" in cfg.problem
    cfg = config.parse([str(workspace), "--open", "../../etc"], env={})
    assert cfg.open_run is None
