"""`erroranalysis ui [RUNS_DIR_OR_RUN]`: start the Streamlit app on a runs folder (or one run) and print its address.

The app reads only inside the runs folder and the folders named with --allow-path. Who labels comes from one
source: a login proxy's header (--trusted-user-header, believed only with the secret of --proxy-secret-file),
Streamlit's OIDC login ([auth] in .streamlit/secrets.toml), or, on loopback, the single local user (--user).
Without a login the app refuses to bind an address other machines reach, unless --insecure-no-auth. See
docs/app.md.
"""

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


LOOPBACK_NAMES = ("localhost",)
MIN_SECRET = 16  # characters of the proxy secret; `openssl rand -hex 32` makes 64


def streamlit_command(app: Path, target: Path, *, port: int, host: str, user: str | None, open_run: str | None,
                      labels_db: Path | None, browser: bool = False, allow_paths: tuple[Path, ...] = (),
                      trusted_user_header: str | None = None, proxy_secret_file: Path | None = None,
                      read_only: bool = False, viewers: tuple[str, ...] = ()) -> list[str]:
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
    for folder in allow_paths:
        cmd += ["--allow-path", str(folder)]
    if trusted_user_header:
        cmd += ["--trusted-user-header", trusted_user_header, "--proxy-secret-file", str(proxy_secret_file)]
    if read_only:
        cmd += ["--read-only"]
    if viewers:
        cmd += ["--viewers", ",".join(viewers)]
    return cmd


def is_loopback(host: str) -> bool:
    import ipaddress

    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def secrets_files(app: Path) -> list[Path]:
    """Where Streamlit looks for secrets.toml: the user's, the working folder's, the app's own folder's."""
    return [Path.home() / ".streamlit" / "secrets.toml", Path.cwd() / ".streamlit" / "secrets.toml",
            app.parent / ".streamlit" / "secrets.toml"]


def oidc_configured(app: Path) -> bool:
    """Whether a secrets.toml Streamlit reads has an [auth] section (Streamlit's OIDC login, st.login)."""
    import tomllib

    from erroranalysis.core.errors import UserError

    found = False
    for file in secrets_files(app):
        if not file.is_file():
            continue
        try:
            found |= "auth" in tomllib.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise UserError(f"{file}: unreadable secrets ({type(exc).__name__}); fix it or move it away.") from None
    return found


def check_secret_file(path: Path) -> Path:
    """The proxy secret file, checked: readable, at least MIN_SECRET characters. Warns when others may read it."""
    from erroranalysis.core.errors import UserError

    try:
        secret = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--proxy-secret-file {path}: cannot be read ({type(exc).__name__}); write one with: "
                        f"openssl rand -hex 32 > {path}") from None
    if len(secret) < MIN_SECRET:
        raise UserError(f"--proxy-secret-file {path}: {len(secret)} characters; a secret needs {MIN_SECRET} or "
                        f"more: openssl rand -hex 32 > {path}")
    if path.stat().st_mode & 0o077:
        typer.echo(f"  warning: {path} may be read by other users; chmod 600 it (only the app and the proxy "
                   "need it).", err=True)
    return path.resolve()


def viewer_names(viewers: str | None, viewers_file: Path | None) -> tuple[str, ...]:
    """--viewers a,b and the names in --viewers-file (one per line or comma-separated; # starts a comment)."""
    from erroranalysis.core.errors import UserError

    text = viewers or ""
    if viewers_file is not None:
        try:
            lines = viewers_file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"--viewers-file {viewers_file}: cannot be read ({type(exc).__name__}).") from None
        text += "," + ",".join(line.split("#", 1)[0] for line in lines)
    names = [n.strip() for n in text.split(",") if n.strip()]
    return tuple(dict.fromkeys(names))


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


def _login(app: Path, header: str | None, secret_file: Path | None, user: str | None) -> str | None:
    """What establishes identities, in words (None: the single local user), with the combinations refused."""
    import importlib.util

    from erroranalysis.core.errors import UserError

    if header is not None:
        header = header.strip()
        if not header or any(c in header for c in " :\t\r\n") or "_" in header:
            raise UserError(f"--trusted-user-header {header!r}: not a header name such as X-Forwarded-User (no "
                            "spaces, colons or underscores: proxies drop headers with underscores).")
        if secret_file is None:
            raise UserError("--trusted-user-header needs --proxy-secret-file: without a secret only the proxy knows, "
                            "any process that reaches the port could send the header and label as anyone.")
        check_secret_file(secret_file)
    elif secret_file is not None:
        raise UserError("--proxy-secret-file is the secret of a login proxy; pass --trusted-user-header too.")
    oidc = oidc_configured(app)
    if (header or oidc) and user:
        raise UserError("--user names the single local user; with a login each person labels as who they signed "
                        "in as. Leave --user out.")
    if header:
        return f"header {header} from the login proxy (with its secret)" + (
            "; secrets.toml [auth] is ignored" if oidc else "")
    if oidc:
        if importlib.util.find_spec("authlib") is None:
            raise UserError("secrets.toml has an [auth] section, but Streamlit's OIDC login needs Authlib: "
                            "pip install 'erroranalysis-ml[auth]' (or 'streamlit[auth]').")
        return "OIDC login (secrets.toml [auth])"
    return None


@handle_errors
def ui(
    target: Annotated[Optional[Path], typer.Argument(help="A runs folder, or one run (its folder becomes the "
                                                     "workspace). Default: ./runs")] = None,
    port: Annotated[int, typer.Option("--port", "-p", help="Port to serve on.")] = 8501,
    host: Annotated[str, typer.Option("--host", help="Address to bind. Another address than loopback needs a login "
                                      "(--trusted-user-header, or OIDC in secrets.toml) or --insecure-no-auth.")
                    ] = "127.0.0.1",
    user: Annotated[Optional[str], typer.Option("--user", help="Name labels are recorded under "
                                                "(default: $ERRORANALYSIS_USER or your login).")] = None,
    open_run: Annotated[Optional[str], typer.Option("--open", help="Run to open first: a name inside the folder "
                                                    "or a path to it.")] = None,
    labels_db: Annotated[Optional[Path], typer.Option("--labels-db", help="Labels database for every run (default: "
                                                      "the nearest labels.sqlite above each run, else <runs "
                                                      "folder>/labels.sqlite; see docs/labels.md).")] = None,
    browser: Annotated[bool, typer.Option("--browser/--no-browser", help="Open a web browser too.")] = False,
    allow_path: Annotated[Optional[list[Path]], typer.Option("--allow-path", help="Another folder the app may read "
                                                             "(e.g. your checkpoints, for their training logs). "
                                                             "Repeatable. Nothing else outside the runs folder is "
                                                             "read.")] = None,
    trusted_user_header: Annotated[Optional[str], typer.Option("--trusted-user-header", help="Behind a login proxy: "
                                                               "the header naming the signed-in user (e.g. "
                                                               "X-Forwarded-User). Needs --proxy-secret-file.")
                                   ] = None,
    proxy_secret_file: Annotated[Optional[Path], typer.Option("--proxy-secret-file", help="A file holding the "
                                                              "secret the proxy sends in X-Erroranalysis-Proxy-"
                                                              "Secret; a request without it gets no identity.")
                                 ] = None,
    read_only: Annotated[bool, typer.Option("--read-only", help="Nobody may change labels (the labels store "
                                            "refuses every write).")] = False,
    viewers: Annotated[Optional[str], typer.Option("--viewers", help="Users who may read but not change labels, "
                                                   "comma-separated (needs a login).")] = None,
    viewers_file: Annotated[Optional[Path], typer.Option("--viewers-file", help="A file of viewers, one per "
                                                         "line.")] = None,
    insecure_no_auth: Annotated[bool, typer.Option("--insecure-no-auth", help="Bind a non-loopback --host without "
                                                   "any login: anyone who reaches it reads every run and labels "
                                                   "under any name.")] = False,
) -> None:
    import subprocess

    from erroranalysis.core.errors import UserError
    from erroranalysis.core.validation import check_param
    from erroranalysis.rundir import MANIFEST

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
    folders = []
    for folder in allow_path or []:
        if not folder.is_dir():
            raise UserError(f"--allow-path {folder}: not a folder; name a folder the app may read.")
        folders.append(folder.resolve())
    app = app_path()
    if not app.is_file():
        raise UserError(f"{app}: the app is missing from this installation; install erroranalysis from a source "
                        "checkout (pip install -e .).")
    login = _login(app, trusted_user_header, proxy_secret_file, user)
    names = viewer_names(viewers, viewers_file)
    if names and login is None:
        raise UserError("--viewers needs a login (--trusted-user-header, or OIDC in secrets.toml): without one "
                        "anyone types another name in the app.")
    if not is_loopback(host) and login is None and not insecure_no_auth:
        raise UserError(f"--host {host}: other machines would reach the app with no login; put it behind a login "
                        "proxy (--trusted-user-header, see docs/app.md), configure OIDC in .streamlit/secrets.toml, "
                        "or pass --insecure-no-auth.")
    if not port_free(host, port):
        raise UserError(f"port {port} on {host} is in use (another app?); pass --port {port + 1}.")

    shown_host = "localhost" if host in ("127.0.0.1", "localhost") else host
    url = f"http://{shown_host}:{port}/" + (f"?run={open_run}" if open_run else "")
    typer.echo(f"erroranalysis app: {url}")
    typer.echo(f"  runs folder {root}")
    typer.echo(f"  labels      {labels_db.resolve() if labels_db else _default_labels(root)}")
    for folder in folders:
        typer.echo(f"  also reads  {folder}")
    typer.echo(f"  identity    {login or 'one local user, named in the app (--user)'}")
    if read_only or names:
        typer.echo("  access      " + ("read-only for everyone" if read_only else f"viewers {', '.join(names)}"))
    if not is_loopback(host) and login is None:
        typer.echo(f"  warning: bound to {host} with no login; anyone who can reach it can read these runs and "
                   "label them under any name.", err=True)
    typer.echo("  Ctrl+C to stop", err=True)
    cmd = streamlit_command(app, root, port=port, host=host, user=user, open_run=open_run,
                            labels_db=labels_db.resolve() if labels_db else None, browser=browser,
                            allow_paths=tuple(folders), trusted_user_header=trusted_user_header,
                            proxy_secret_file=proxy_secret_file.resolve() if proxy_secret_file else None,
                            read_only=read_only, viewers=names)
    try:
        code = subprocess.call(cmd)
    except KeyboardInterrupt:
        code = 0
    if code not in (0, -2, 130):
        raise typer.Exit(code)
