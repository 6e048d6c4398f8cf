"""What the app was started on: the runs folder, the labels database, the user name, the run to open, the other
folders it may read, where identities come from and who may write.

Read from the script arguments (`streamlit run ui/app.py -- RUNS_DIR_OR_RUN --user NAME --open RUN --labels-db
PATH --allow-path DIR --trusted-user-header NAME --proxy-secret-file FILE --read-only --viewers a,b`, which is what
`erroranalysis ui` runs) or, when absent, from the environment (ERRORANALYSIS_RUNS, ERRORANALYSIS_USER,
ERRORANALYSIS_OPEN, ERRORANALYSIS_LABELS_DB, ERRORANALYSIS_ALLOW_PATHS (os.pathsep-separated),
ERRORANALYSIS_TRUSTED_USER_HEADER, ERRORANALYSIS_PROXY_SECRET_FILE, ERRORANALYSIS_READ_ONLY=1,
ERRORANALYSIS_VIEWERS), which is how tests start the app.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from erroranalysis.core import storage
from erroranalysis.labels import default_user, labels_db_for, workspace_db
from erroranalysis.rundir import MANIFEST, remote_tree
from erroranalysis_ui.eaui.workspace import Workspace


@dataclass(frozen=True)
class AppConfig:
    runs_root: Path          # the only folder the app reads runs from
    labels_db: Path          # --labels-db, else <runs folder>/labels.sqlite (see labels_db_of for a run's)
    user: str                # who labels are recorded as (each session may change it)
    open_run: str | None     # run key to open first, relative to runs_root
    problem: str | None = None  # a message to show beside the pages (the runs folder is missing)
    labels_db_given: bool = False  # --labels-db was passed: every run's labels live there
    workspace: Workspace | None = None  # the folders the app may read (eaui.workspace)
    trusted_user_header: str | None = None  # identities come from this header, set by the login proxy
    proxy_secret_sha256: str | None = None  # sha256 of the secret the proxy sends (the secret is not kept)
    read_only: bool = False  # --read-only: nobody writes labels
    viewers: frozenset[str] = field(default_factory=frozenset)  # users who may read but not write
    blocked: str | None = None  # a message to show INSTEAD of pages: a login or access setting is unusable

    def __post_init__(self):
        if self.workspace is None:
            files = (self.labels_db,) if self.labels_db_given else ()
            object.__setattr__(self, "workspace", Workspace.of(self.runs_root, files=files))

    def labels_db_of(self, run_path: Path | None) -> Path:
        """The database a run's labels live in: --labels-db when given, else the workspace rule
        (erroranalysis.labels.labels_db_for: the nearest labels.sqlite above the run, up to the runs folder)."""
        if self.labels_db_given or run_path is None:
            return self.labels_db
        return labels_db_for(run_path, root=self.runs_root)


def _script_args() -> list[str]:
    """The arguments after `--` when Streamlit runs this app (Streamlit sets sys.argv to [script, *args])."""
    if sys.argv and Path(sys.argv[0]).name == "app.py":
        return list(sys.argv[1:])
    return []


def parse(argv: list[str] | None = None, env: dict | None = None) -> AppConfig:
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(prog="ui/app.py", add_help=False)
    parser.add_argument("runs", nargs="?")
    parser.add_argument("--user")
    parser.add_argument("--open", dest="open_run")
    parser.add_argument("--labels-db")
    parser.add_argument("--allow-path", action="append", default=[])
    parser.add_argument("--trusted-user-header")
    parser.add_argument("--proxy-secret-file")
    parser.add_argument("--read-only", action="store_true")
    parser.add_argument("--viewers")
    args, _ = parser.parse_known_args(_script_args() if argv is None else argv)

    target = args.runs or env.get("ERRORANALYSIS_RUNS") or ("runs" if Path("runs").is_dir() else ".")
    user = args.user or env.get("ERRORANALYSIS_USER") or default_user()
    open_run = args.open_run or env.get("ERRORANALYSIS_OPEN") or None
    labels_db = args.labels_db or env.get("ERRORANALYSIS_LABELS_DB") or None

    remote = None
    if storage.is_url(target):  # runs on object storage, read from their local mirror
        remote = storage.ObjectPath.parse(target)
        path = remote_tree.mirror_root(remote)
        path.mkdir(parents=True, exist_ok=True)
    else:
        path = Path(target).expanduser().resolve()
    problem = None
    if remote is not None:
        root = path
    elif (path / MANIFEST).is_file():  # a single run: its folder is the workspace, and it opens first
        root, open_run = path.parent, open_run or path.name
    else:
        root = path
        if not path.is_dir():
            problem = f"{target}: no such folder; start the app on a runs folder: erroranalysis ui runs/"
    open_key = _open_key(root, open_run) if open_run and remote is None else (open_run or None)
    db = Path(labels_db).expanduser().resolve() if labels_db else workspace_db(root)
    allow = args.allow_path or [p for p in env.get("ERRORANALYSIS_ALLOW_PATHS", "").split(os.pathsep) if p]
    header = (args.trusted_user_header or env.get("ERRORANALYSIS_TRUSTED_USER_HEADER") or "").strip() or None
    secret_file = args.proxy_secret_file or env.get("ERRORANALYSIS_PROXY_SECRET_FILE") or None
    secret, blocked = _secret_digest(header, secret_file)
    viewers = args.viewers if args.viewers is not None else env.get("ERRORANALYSIS_VIEWERS", "")
    workspace = Workspace.of(root, allow_paths=[Path(p).expanduser() for p in allow],
                             files=(db,) if labels_db else (), remote=str(remote) if remote else None)
    return AppConfig(runs_root=root, labels_db=db, user=user.strip() or "unknown", open_run=open_key,
                     problem=problem, labels_db_given=bool(labels_db), workspace=workspace,
                     trusted_user_header=header, proxy_secret_sha256=secret,
                     read_only=args.read_only or env.get("ERRORANALYSIS_READ_ONLY", "") not in ("", "0"),
                     viewers=frozenset(v.strip() for v in viewers.split(",") if v.strip()), blocked=blocked)


def _secret_digest(header: str | None, secret_file: str | None) -> tuple[str | None, str | None]:
    """(sha256 of the proxy's secret, None) or (None, why the app must refuse every request). A trusted header
    without a secret is refused: any process that reaches the port could send the header."""
    if header is None:
        return None, None
    if not secret_file:
        return None, ("The app is set to trust a login proxy's user header but was given no proxy secret "
                      "(--proxy-secret-file); it refuses every request until restarted with one.")
    try:
        secret = Path(secret_file).expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"The proxy secret file cannot be read ({type(exc).__name__}); the app refuses every request."
    if not secret:
        return None, "The proxy secret file is empty; the app refuses every request."
    return hashlib.sha256(secret.encode("utf-8")).hexdigest(), None


def _open_key(root: Path, open_run: str) -> str | None:
    """--open accepts a run key relative to the runs folder, or a path to a run inside it."""
    candidate = Path(open_run).expanduser()
    for path in ([candidate] if candidate.is_absolute() else [root / candidate, Path.cwd() / candidate]):
        try:
            rel = path.resolve().relative_to(root)
        except ValueError:
            continue
        if (root / rel / MANIFEST).is_file():
            return rel.as_posix()
    return None
