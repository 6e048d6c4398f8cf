"""Which labels database a run's labels live in: one rule, used by the app and every command.

    labels_db_for("runs/exp/step-500")               # the CLI: no workspace root known
    labels_db_for("runs/exp/step-500", root="runs")  # the app started on runs/

1. `--labels-db PATH`, when given, always wins (callers check it before asking this module).
2. Else the nearest folder above the run that already holds `labels.sqlite`: the run's parent first, then its
   parent, up to `root` when one is given (the app's runs folder), else up to MAX_LEVELS folders.
3. Else, when none exists yet: `<root>/labels.sqlite` when a root is given, else `<run's parent>/labels.sqlite`.

So a nested run (`runs/exp/step-500`) lands in one database whichever creates it first: the app creates
`runs/labels.sqlite` and the CLI then finds it two levels up; the CLI creates `runs/exp/labels.sqlite` and the app
then finds it above the run before its own default. Inside a database, a run's labels are keyed by the run's path
relative to the database's folder (`run_key`), so both name the run the same way.
"""

from __future__ import annotations

from pathlib import Path

from erroranalysis.errors import UserError

DEFAULT_DB_NAME = "labels.sqlite"
MAX_LEVELS = 3  # folders searched above a run when no root bounds the search


def labels_db_for(run_path: str | Path, root: str | Path | None = None) -> Path:
    """The labels database of the run at `run_path` (see the module docstring for the rule)."""
    run = Path(run_path).expanduser().resolve()
    folders = list(run.parents)
    if root is None:
        folders = folders[:MAX_LEVELS]
    else:
        top = Path(root).expanduser().resolve()
        if top not in folders:
            raise UserError(f"{run_path}: not inside the runs folder {top}; open a run inside it, or pass "
                            "--labels-db.")
        folders = folders[: folders.index(top) + 1]
    for folder in folders:
        if (folder / DEFAULT_DB_NAME).is_file():
            return folder / DEFAULT_DB_NAME
    return folders[-1] / DEFAULT_DB_NAME if root is not None else run.parent / DEFAULT_DB_NAME


def workspace_db(root: str | Path) -> Path:
    """The database of a runs folder as a whole (what the app and import-taxonomy default to)."""
    return Path(root).expanduser().resolve() / DEFAULT_DB_NAME


def db_from_cwd(hint: str = "--labels-db PATH") -> Path:
    """The database a command without a run uses by default: ./runs/labels.sqlite when ./runs is a folder."""
    runs = Path("runs")
    if not runs.is_dir():
        raise UserError(f"no labels database given and no ./runs folder here; pass {hint} (the workspace's "
                        "database, e.g. runs/labels.sqlite).")
    return workspace_db(runs)


def run_key(run_path: str | Path, db_path: str | Path) -> str:
    """The name a run's labels are stored under: its path relative to the database's folder when it lies inside
    it (`sample`, `team/sample`), else the run folder's name."""
    run = Path(run_path).resolve()
    base = Path(db_path).resolve().parent
    try:
        rel = run.relative_to(base)
    except ValueError:
        return run.name
    return rel.as_posix() if rel.parts else run.name
