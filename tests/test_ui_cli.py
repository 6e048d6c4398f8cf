"""`erroranalysis ui`: argument checks and the Streamlit command it runs; the app's own argument parsing."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner
from ui_fixtures import make_run

from erroranalysis.cli import ui as ui_cli
from erroranalysis.cli.app import app
from erroranalysis_ui.eaui import config


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
    (["--port", "0"], "--port 0 is invalid"),
    (["--port", "70000"], "--port 70000 is invalid"),
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


@pytest.mark.slow
def test_a_wheel_ships_the_app_and_it_runs_from_there(tmp_path, workspace, wheel):
    """`pip install erroranalysis-ml` (not editable) must give a working `erroranalysis ui`: the app is packaged as
    erroranalysis_ui, and app_path finds it there."""
    import os
    import subprocess
    import zipfile

    root = Path(__file__).resolve().parent.parent
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=root, check=True,
                           capture_output=True, text=True).stdout.split()
    shipped = {n.split("/", 1)[1] for n in zipfile.ZipFile(wheel).namelist() if n.startswith("erroranalysis_ui/")}
    source = {name[len("ui/"):] for name in files if name.startswith("ui/") and name.endswith((".py", ".svg"))}
    assert source and source <= shipped

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    code = ("from erroranalysis.cli.ui import app_path\n"
            "from streamlit.testing.v1 import AppTest\n"
            "path = app_path()\n"
            "at = AppTest.from_file(str(path), default_timeout=120)\n"
            "at.run()\n"
            "assert not at.exception, at.exception\n"
            "print(path)\n")
    env = {**os.environ, "PYTHONPATH": str(target), "ERRORANALYSIS_RUNS": str(workspace),
           "ERRORANALYSIS_LABELS_DB": str(tmp_path / "labels.sqlite")}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert Path(out.stdout.strip().splitlines()[-1]) == target / "erroranalysis_ui" / "app.py"


# -- team settings: folders, logins, roles --------------------------------------------------------------------


@pytest.fixture()
def launched(monkeypatch, tmp_path):
    """`erroranalysis ui ...` with Streamlit replaced by a recorder: {'cmd': the command it would run}. HOME and the
    working folder are empty, so no secrets.toml of the machine is read."""
    import subprocess

    seen = {}

    def fake_call(cmd):
        seen["cmd"] = cmd
        return 0

    monkeypatch.setattr(subprocess, "call", fake_call)
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return seen


def _free_port(host: str = "0.0.0.0") -> str:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return str(sock.getsockname()[1])


def _secret(tmp_path, text: str = "s3cr3t" * 8, name: str = "proxy-secret") -> Path:
    path = tmp_path / name
    path.write_text(text + "\n")
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("args, message", [
    (["--host", "0.0.0.0"], "other machines would reach the app with no login"),
    (["--host", "10.1.2.3"], "or pass --insecure-no-auth"),
    (["--trusted-user-header", "X-Forwarded-User"], "needs --proxy-secret-file"),
    (["--proxy-secret-file", "SECRET"], "pass --trusted-user-header too"),
    (["--trusted-user-header", "X_Forwarded_User", "--proxy-secret-file", "SECRET"], "underscores"),
    (["--trusted-user-header", "X-Forwarded-User", "--proxy-secret-file", "SHORT"], "needs 16 or more"),
    (["--trusted-user-header", "X-Forwarded-User", "--proxy-secret-file", "MISSING"], "cannot be read"),
    (["--trusted-user-header", "X-Forwarded-User", "--proxy-secret-file", "SECRET", "--user", "ann"],
     "Leave --user out"),
    (["--viewers", "bob"], "--viewers needs a login"),
    (["--allow-path", "MISSING"], "--allow-path"),
])
def test_team_settings_that_would_not_hold_are_refused(args, message, workspace, launched, tmp_path):
    files = {"SECRET": _secret(tmp_path), "SHORT": _secret(tmp_path, "short", "short-secret"),
             "MISSING": tmp_path / "no-such-file"}
    argv = ["ui", str(workspace), "--port", _free_port()] + [str(files.get(a, a)) for a in args]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert "cmd" not in launched  # nothing was started


def test_a_login_proxy_setup_is_passed_to_the_app(workspace, launched, tmp_path):
    secret = _secret(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "viewers.txt").write_text("# read-only people\ncarol\ndave, erin\n")
    port = _free_port()
    result = CliRunner().invoke(app, [
        "ui", str(workspace), "--host", "0.0.0.0", "--port", port, "--trusted-user-header", "X-Forwarded-User",
        "--proxy-secret-file", str(secret), "--viewers", "bob", "--viewers-file", str(tmp_path / "viewers.txt"),
        "--allow-path", str(tmp_path / "checkpoints")])
    assert result.exit_code == 0, result.output
    assert "header X-Forwarded-User from the login proxy" in result.output
    assert "viewers bob, carol, dave, erin" in result.output and "warning" not in result.output
    cmd = launched["cmd"]
    assert cmd[cmd.index("--server.address") + 1] == "0.0.0.0"
    assert cmd[cmd.index("--") + 1:] == [str(workspace.resolve()), "--allow-path", str(tmp_path / "checkpoints"),
                                         "--trusted-user-header", "X-Forwarded-User", "--proxy-secret-file",
                                         str(secret), "--viewers", "bob,carol,dave,erin"]
    assert "s3cr3t" not in " ".join(cmd)  # the secret stays in its file, off the process list


def test_no_login_on_another_address_only_when_asked_by_name(workspace, launched):
    result = CliRunner().invoke(app, ["ui", str(workspace), "--host", "0.0.0.0", "--port", _free_port(),
                                      "--insecure-no-auth", "--read-only"])
    assert result.exit_code == 0, result.output
    assert "with no login; anyone who can reach it" in result.output and "read-only for everyone" in result.output
    assert launched["cmd"][-1] == "--read-only"


def test_loopback_keeps_the_single_local_user(workspace, launched):
    result = CliRunner().invoke(app, ["ui", str(workspace), "--port", _free_port("127.0.0.1"), "--user", "ann"])
    assert result.exit_code == 0, result.output
    assert "one local user" in result.output
    assert ui_cli.is_loopback("127.0.0.1") and ui_cli.is_loopback("::1") and ui_cli.is_loopback("localhost")
    assert ui_cli.is_loopback("127.8.0.1") and not ui_cli.is_loopback("0.0.0.0") and not ui_cli.is_loopback("::")


def test_oidc_in_secrets_toml_is_a_login(workspace, launched, tmp_path, monkeypatch):
    """An [auth] section in ./.streamlit/secrets.toml makes Streamlit's OIDC login the identity source; it needs
    Authlib, which is named when missing."""
    import importlib.util

    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "secrets.toml").write_text(
        '[auth]\nredirect_uri = "https://ea.example.com/oauth2callback"\ncookie_secret = "xyz"\n'
        'client_id = "ea"\nclient_secret = "abc"\n'
        'server_metadata_url = "https://login.example.com/.well-known/openid-configuration"\n')
    real = importlib.util.find_spec
    for installed in (False, True):
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a, installed=installed: (real("pytest") if installed else None)
                            if name == "authlib" else real(name, *a))
        result = CliRunner().invoke(app, ["ui", str(workspace), "--host", "0.0.0.0", "--port", _free_port(),
                                          "--viewers", "carol"])
        if installed:
            assert result.exit_code == 0 and "OIDC login" in result.output, result.output
        else:
            assert result.exit_code == 2 and "pip install 'erroranalysis-ml[auth]'" in result.output, result.output


def test_app_config_of_the_team_settings(workspace, tmp_path):
    secret = _secret(tmp_path)
    cfg = config.parse([str(workspace), "--allow-path", str(tmp_path), "--trusted-user-header", "X-Forwarded-User",
                        "--proxy-secret-file", str(secret), "--read-only", "--viewers", "carol, dave"], env={})
    assert cfg.workspace.allowed == (tmp_path.resolve(),) and cfg.trusted_user_header == "X-Forwarded-User"
    assert cfg.read_only and cfg.viewers == {"carol", "dave"} and cfg.blocked is None
    assert len(cfg.proxy_secret_sha256) == 64 and "s3cr3t" not in repr(cfg)
    cfg = config.parse([], env={"ERRORANALYSIS_RUNS": str(workspace), "ERRORANALYSIS_ALLOW_PATHS": str(tmp_path),
                                "ERRORANALYSIS_TRUSTED_USER_HEADER": "X-Forwarded-User"})
    assert cfg.workspace.allowed == (tmp_path.resolve(),)
    assert cfg.blocked and "no proxy secret" in cfg.blocked  # a trusted header without a secret: nobody gets in
    cfg = config.parse([str(workspace), "--trusted-user-header", "X-Forwarded-User", "--proxy-secret-file",
                        str(tmp_path / "gone")], env={})
    assert cfg.blocked and "cannot be read" in cfg.blocked
