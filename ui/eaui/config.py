"""What the app was started on: the runs folder, the labels database, the user name, the run to open.

Read from the script arguments (`streamlit run ui/app.py -- RUNS_DIR_OR_RUN --user NAME --open RUN --labels-db
PATH`, which is what `erroranalysis ui` runs) or, when absent, from the environment (ERRORANALYSIS_RUNS,
ERRORANALYSIS_USER, ERRORANALYSIS_OPEN, ERRORANALYSIS_LABELS_DB), which is how tests start the app.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from erroranalysis.labels import default_user, labels_db_for, workspace_db
from erroranalysis.rundir import MANIFEST


@dataclass(frozen=True)
class AppConfig:
    runs_root: Path          # the only folder the app reads runs from
    labels_db: Path          # --labels-db, else <runs folder>/labels.sqlite (see labels_db_of for a run's)
    user: str                # who labels are recorded as (each session may change it)
    open_run: str | None     # run key to open first, relative to runs_root
    problem: str | None = None  # a message to show instead of pages when the configuration is unusable
    labels_db_given: bool = False  # --labels-db was passed: every run's labels live there

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
    args, _ = parser.parse_known_args(_script_args() if argv is None else argv)

    target = args.runs or env.get("ERRORANALYSIS_RUNS") or ("runs" if Path("runs").is_dir() else ".")
    user = args.user or env.get("ERRORANALYSIS_USER") or default_user()
    open_run = args.open_run or env.get("ERRORANALYSIS_OPEN") or None
    labels_db = args.labels_db or env.get("ERRORANALYSIS_LABELS_DB") or None

    path = Path(target).expanduser().resolve()
    problem = None
    if (path / MANIFEST).is_file():  # a single run: its folder is the workspace, and it opens first
        root, open_run = path.parent, open_run or path.name
    else:
        root = path
        if not path.is_dir():
            problem = f"{target}: no such folder; start the app on a runs folder: erroranalysis ui runs/"
    open_key = _open_key(root, open_run) if open_run else None
    db = Path(labels_db).expanduser().resolve() if labels_db else workspace_db(root)
    return AppConfig(runs_root=root, labels_db=db, user=user.strip() or "unknown", open_run=open_key,
                     problem=problem, labels_db_given=bool(labels_db))


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
