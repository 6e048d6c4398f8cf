"""`erroranalysis ui [RUNS_DIR_OR_RUN]`: start the Streamlit app on a runs folder (or one run) and print its address."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from erroranalysis.cli.common import handle_errors

# The app's look, passed as Streamlit options so `erroranalysis ui` looks the same from any working directory.
THEME = {
    "theme.base": "light",
    "theme.primaryColor": "#4F46E5",
    "theme.backgroundColor": "#FFFFFF",
    "theme.secondaryBackgroundColor": "#F5F7FB",
    "theme.textColor": "#0F172A",
    "theme.borderColor": "#E2E8F0",
    "theme.baseRadius": "0.6rem",
}


def register(app: typer.Typer) -> None:
    app.command("ui", help="Open the app: browse failures, label error types, export the taxonomy.")(ui)


def app_path() -> Path:
    """The app's app.py: the installed `erroranalysis_ui` (a wheel, or ui/ through an editable install), else
    ui/ beside the package in a source checkout."""
    import importlib.util

    import erroranalysis

    spec = importlib.util.find_spec("erroranalysis_ui")
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0]).resolve() / "app.py"
    return Path(erroranalysis.__file__).resolve().parent.parent / "ui" / "app.py"


def streamlit_command(app: Path, target: Path, *, port: int, host: str, user: str | None, open_run: str | None,
                      labels_db: Path | None, browser: bool = False) -> list[str]:
    import sys

    cmd = [sys.executable, "-m", "streamlit", "run", str(app),
           "--server.port", str(port), "--server.address", host,
           "--server.headless", "false" if browser else "true",
           "--browser.gatherUsageStats", "false",
           "--browser.serverAddress", "localhost" if host in ("127.0.0.1", "localhost") else host,
           "--server.fileWatcherType", "none", "--server.runOnSave", "false",
           "--client.toolbarMode", "minimal", "--global.showWarningOnDirectExecution", "false"]
    for key, value in THEME.items():
        cmd += [f"--{key}", value]
    cmd += ["--", str(target)]
    if user:
        cmd += ["--user", user]
    if open_run:
        cmd += ["--open", open_run]
    if labels_db:
        cmd += ["--labels-db", str(labels_db)]
    return cmd


def _default_labels(root: Path) -> str:
    from erroranalysis.labels import workspace_db

    return f"{workspace_db(root)} (or the nearest labels.sqlite above a run)"


def port_free(host: str, port: int) -> bool:
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


@handle_errors
def ui(
    target: Annotated[Optional[Path], typer.Argument(help="A runs folder, or one run (its folder becomes the "
                                                     "workspace). Default: ./runs")] = None,
    port: Annotated[int, typer.Option("--port", "-p", help="Port to serve on.")] = 8501,
    host: Annotated[str, typer.Option("--host", help="Address to bind. The app has no login: keep 127.0.0.1 "
                                      "unless everyone who can reach the address may read and label.")
                    ] = "127.0.0.1",
    user: Annotated[Optional[str], typer.Option("--user", help="Name labels are recorded under "
                                                "(default: $ERRORANALYSIS_USER or your login).")] = None,
    open_run: Annotated[Optional[str], typer.Option("--open", help="Run to open first: a name inside the folder "
                                                    "or a path to it.")] = None,
    labels_db: Annotated[Optional[Path], typer.Option("--labels-db", help="Labels database for every run (default: "
                                                      "the nearest labels.sqlite above each run, else <runs "
                                                      "folder>/labels.sqlite; see docs/labels.md).")] = None,
    browser: Annotated[bool, typer.Option("--browser/--no-browser", help="Open a web browser too.")] = False,
) -> None:
    import subprocess

    from erroranalysis.errors import UserError
    from erroranalysis.rundir import MANIFEST
    from erroranalysis.validation import check_param

    check_param("--port", port, 1 <= port <= 65535, "an integer from 1 to 65535")
    if target is None:
        target = Path("runs")
    if not target.exists():
        raise UserError(f"{target}: no such folder; pass a runs folder or a run made by 'erroranalysis run'.")
    if not target.is_dir():
        raise UserError(f"{target}: not a folder; pass a runs folder or a run directory.")
    target = target.resolve()
    root = target.parent if (target / MANIFEST).is_file() else target
    if open_run is not None:
        candidate = Path(open_run)
        resolved = candidate.resolve() if candidate.exists() else (root / open_run).resolve()
        try:
            resolved.relative_to(root)
        except ValueError:
            raise UserError(f"--open {open_run}: not inside the runs folder {root}; the app reads only there.") \
                from None
        if not (resolved / MANIFEST).is_file():
            raise UserError(f"--open {open_run}: not a run directory (no {MANIFEST}) in {root}.")
        open_run = resolved.relative_to(root).as_posix()
    elif target != root:
        open_run = target.name
    if labels_db is not None and labels_db.exists() and not labels_db.is_file():
        raise UserError(f"--labels-db {labels_db}: is a folder; pass a file such as {labels_db / 'labels.sqlite'}.")
    app = app_path()
    if not app.is_file():
        raise UserError(f"{app}: the app is missing from this installation; install erroranalysis from a source "
                        "checkout (pip install -e .).")
    if not port_free(host, port):
        raise UserError(f"port {port} on {host} is in use (another app?); pass --port {port + 1}.")

    shown_host = "localhost" if host in ("127.0.0.1", "localhost") else host
    url = f"http://{shown_host}:{port}/" + (f"?run={open_run}" if open_run else "")
    typer.echo(f"erroranalysis app: {url}")
    typer.echo(f"  runs folder {root}")
    typer.echo(f"  labels      {labels_db.resolve() if labels_db else _default_labels(root)}")
    if host not in ("127.0.0.1", "localhost", "::1"):
        typer.echo(f"  warning: bound to {host}; anyone who can reach it can read these runs and label them.",
                   err=True)
    typer.echo("  Ctrl+C to stop", err=True)
    cmd = streamlit_command(app, root, port=port, host=host, user=user, open_run=open_run,
                            labels_db=labels_db.resolve() if labels_db else None, browser=browser)
    try:
        code = subprocess.call(cmd)
    except KeyboardInterrupt:
        code = 0
    if code not in (0, -2, 130):
        raise typer.Exit(code)
