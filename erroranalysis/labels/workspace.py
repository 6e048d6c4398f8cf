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
relative to the database's folder, or, for a run outside it, by its name and the id in its manifest (`run_key`), so
both name the run the same way.
"""

from __future__ import annotations

from pathlib import Path

from erroranalysis.core.errors import UserError

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


def run_key(run, db_path: str | Path) -> str:
    """The name a run's labels are stored under, unique within the database at `db_path`:

    - a run inside the database's folder: its path relative to that folder (`sample`, `exp/step-500`), so labels
      follow the runs folder when it moves as a whole;
    - a run elsewhere (a database kept apart with --labels-db): `<folder name>@<12 hex digits of its run id>`, the
      id written into its manifest when it was created (kept by --overwrite), so two runs of one name never share
      labels and a run keeps them when it moves; a run made before ids (no `run_id`) by its absolute path.

    `run` is a Run (anything with `.path` and `.id`), or a path when the run lies inside the database's folder."""
    path = Path(getattr(run, "path", run)).resolve()
    base = Path(db_path).resolve().parent
    try:
        rel = path.relative_to(base)
    except ValueError:
        rel = None
    if rel is not None:
        return rel.as_posix() if rel.parts else path.name
    if not hasattr(run, "id"):
        raise ValueError(f"{path}: lies outside the labels database's folder ({base}), where a run is keyed by the "
                         "id in its manifest; pass the Run (erroranalysis.rundir.Run.open(path)), not its path.")
    return f"{path.name}@{run.id[:12]}" if run.id else path.as_posix()


def shown_key(key: str) -> str:
    """A run key as people read it: `sample` for `sample@1a2b3c4d5e6f` (the id only makes it unique), the folder
    name of an absolute-path key, any other key as it is (`exp/step-500`)."""
    name, _, suffix = key.rpartition("@")
    if name and len(suffix) == 12 and all(c in "0123456789abcdef" for c in suffix):
        return name
    return Path(key).name if key.startswith("/") else key


def keyed_by_path(run, db_path: str | Path) -> bool:
    """Whether the run lies inside the database's folder, so its key is its relative path (no manifest needed)."""
    return Path(getattr(run, "path", run)).resolve().is_relative_to(Path(db_path).resolve().parent)


def legacy_key(run, db_path: str | Path) -> str | None:
    """The key erroranalysis 0.2 and earlier gave a run outside the database's folder (its folder name, shared by
    every run of that name), or None when the run lies inside it (its key has not changed)."""
    return None if keyed_by_path(run, db_path) else Path(getattr(run, "path", run)).resolve().name
