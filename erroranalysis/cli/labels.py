"""`erroranalysis labels ...`: look after the labels database: where a run's labels live, backup and restore,
archive old events, migrate an older schema, check integrity, read the event log (docs/labels.md)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Optional

import typer

from erroranalysis.cli import common

group = typer.Typer(name="labels", no_args_is_help=True, help="Look after the labels database: where, backup, "
                    "restore, archive, migrate, check, log (see docs/labels.md).")

LabelsDb = Annotated[Optional[Path], typer.Option(
    "--labels-db", help="The labels database; default runs/labels.sqlite when ./runs is a folder.")]


def register(app: typer.Typer) -> None:
    app.add_typer(group, name="labels")


def _db(labels_db: Path | None) -> Path:
    from erroranalysis.labels.workspace import db_from_cwd

    return labels_db if labels_db is not None else db_from_cwd()


def _open(labels_db: Path | None, **kwargs):
    from erroranalysis.labels import LabelStore

    return LabelStore(_db(labels_db), create=False, **kwargs)


def _print(text: str) -> None:
    from rich.markup import escape

    out = common.console()
    out.soft_wrap = True
    out.print(escape(text))


@group.command("where", help="Print the labels database a run's labels live in, by the workspace rule.")
@common.handle_errors
def where(
    run: common.RunDir,
    root: Annotated[Optional[Path], typer.Option("--root", help="The runs folder the app is started on, if any.")
                    ] = None,
    as_json: common.Json = False,
) -> None:
    from erroranalysis.labels import labels_db_for, run_key
    from erroranalysis.rundir import Run

    db = labels_db_for(run, root)
    key = run_key(Run.open(run), db)  # a run outside the database's folder is keyed by the id in its manifest
    if as_json:
        common.print_json({"run": str(run), "labels_db": str(db), "exists": db.is_file(), "key": key})
        return
    state = "exists" if db.is_file() else "not made yet"
    _print(f"{db} ({state}); the run's labels are stored under {key!r}")


@group.command("backup", help="Copy the labels database (SQLite's online backup: safe while the app writes).")
@common.handle_errors
def backup(
    dest: Annotated[Optional[Path], typer.Argument(
        help="File (or folder) to write; default <name>-backup-<UTC time>.sqlite beside the database.")] = None,
    labels_db: LabelsDb = None,
) -> None:
    from erroranalysis.labels import backup as backups

    copy = backups.backup(_db(labels_db), dest)
    _print(f"wrote {copy} (checked: ok); restore it with: erroranalysis labels restore {copy} "
           f"--labels-db {_db(labels_db)}")


@group.command("restore", help="Replace the labels database's content with a backup's (the current one is kept "
                               "beside it as <name>-replaced-<UTC time>.sqlite).")
@common.handle_errors
def restore(
    copy: Annotated[Path, typer.Argument(help="The backup file to restore.")],
    labels_db: LabelsDb = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    from erroranalysis.labels import backup as backups

    db = _db(labels_db)
    if db.exists() and not yes and not typer.confirm(f"Replace the labels in {db} with those of {copy}?"):
        raise typer.Exit(1)
    kept = backups.restore(copy, db)
    _print(f"restored {copy} into {db}" + (f"; the replaced database is kept at {kept}" if kept else ""))


@group.command("archive", help="Move old events of the log to an archive file (nothing is lost: read them back "
                               "with 'labels log --archive'; events kept can still be undone).")
@common.handle_errors
def archive(
    labels_db: LabelsDb = None,
    before: Annotated[Optional[str], typer.Option(
        "--before", help="Archive events older than this UTC date or time (2026-01-31 or 2026-01-31T12:00).")
                      ] = None,
    keep: Annotated[Optional[int], typer.Option("--keep", help="Archive all but the newest N events.")] = None,
    to: Annotated[Optional[Path], typer.Option(
        "--to", help="Archive file (appended to); default <name>-archive.sqlite beside the database.")] = None,
) -> None:
    from erroranalysis.core.errors import UserError

    if (before is None) == (keep is None):
        raise UserError("pass exactly one of --before DATE and --keep N.")
    if before is not None:
        _check_date(before)
    result = _open(labels_db).archive(before=before, keep=keep, to=to)
    if not result.moved:
        _print("nothing to archive: no event matches (the newest event, and events undone by kept ones, stay).")
        return
    _print(f"moved {result.moved:,} events (ids {result.first_id} to {result.last_id}) to {result.archive}")


def _check_date(text: str) -> None:
    import datetime as _dt

    from erroranalysis.core.errors import ParameterError

    try:
        _dt.datetime.fromisoformat(text)
    except ValueError:
        raise ParameterError("--before", text, "an ISO date or time in UTC, e.g. 2026-01-31") from None


@group.command("log", help="Print the event log, newest first (or an archive's).")
@common.handle_errors
def log(
    labels_db: LabelsDb = None,
    archive_file: Annotated[Optional[Path], typer.Option("--archive", help="Read this archive file instead.")
                            ] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="Events to print.")] = 20,
    run: Annotated[Optional[str], typer.Option("--run", help="Only this run's events (its key).")] = None,
    user: Annotated[Optional[str], typer.Option("--user", help="Only this user's events.")] = None,
    as_json: common.Json = False,
) -> None:
    from erroranalysis.core.validation import check_int
    from erroranalysis.labels.archive import read_archive

    check_int("--limit", limit, 1)
    if archive_file is not None:
        events = read_archive(archive_file, run=run, user=user, limit=limit)
    else:
        events = _open(labels_db, read_only=True).events(run=run, user=user, limit=limit)
    if as_json:
        common.print_json([dataclasses.asdict(e) for e in events])
        return
    for e in events:
        undone = f" (undone by {e.undone_by})" if e.undone_by else ""
        _print(f"{e.id:>6}  {e.ts[:19].replace('T', ' ')}  {e.user} ({e.writer or '?'})  {e.summary}{undone}")
    if not events:
        _print("no events")


@group.command("check", help="Run SQLite's full integrity check on the labels database.")
@common.handle_errors
def check(labels_db: LabelsDb = None, as_json: common.Json = False) -> None:
    from erroranalysis.labels.backup import restore_hint
    from erroranalysis.labels.connection import DamagedError

    db = _db(labels_db)
    result = _open(labels_db, read_only=True).integrity_check()
    if result != "ok":
        raise DamagedError(f"{db}: integrity_check: {result}; {restore_hint(db)}")
    if as_json:
        common.print_json({"labels_db": str(db), "integrity": result})
        return
    _print(f"{db}: ok")


@group.command("migrate", help="Bring the labels database to this version's schema (after a backup copy). Names "
                               "that clash under Unicode case folding are reported and resolved only when asked.")
@common.handle_errors
def migrate(
    labels_db: LabelsDb = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report what would change; write nothing.")] = False,
    merge_clashes: Annotated[bool, typer.Option(
        "--merge-clashes", help="Merge error types whose names clash into the oldest of them.")] = False,
    rename_clashes: Annotated[bool, typer.Option(
        "--rename-clashes", help="Rename the newer ones of clashing error types: 'NAME (2)', ...")] = False,
) -> None:
    from erroranalysis.core.errors import UserError
    from erroranalysis.labels import schema
    from erroranalysis.labels.connection import Database

    if merge_clashes and rename_clashes:
        raise UserError("pass one of --merge-clashes and --rename-clashes, not both.")
    db = _db(labels_db)
    if not db.exists():
        raise UserError(f"{db}: no labels database here; check --labels-db.")
    schema.check_file(db)
    reader = Database(db, query_only=True)
    schema.quick_check(reader)
    plan = schema.plan(reader)
    how = "merge" if merge_clashes else "rename" if rename_clashes else None
    if plan["version"] == plan["target"]:
        _print(f"{db}: schema {plan['version']} is current; nothing to migrate.")
        return
    _print(f"{db}: schema {plan['version']} -> {plan['target']} (a backup copy is made first)")
    for group_ in plan["clashes"]:
        keep, *others = group_
        for t in others:
            _print(f"  clash: {keep['name']!r} (id {keep['id']}, {keep['examples']} examples) and {t['name']!r} "
                   f"(id {t['id']}, {t['examples']} examples) are one name now; --merge-clashes moves the second's "
                   f"examples into the first and deletes it, --rename-clashes renames the second "
                   f"'{t['name']} (2)' (or the next free number)")
    if dry_run:
        return
    if plan["clashes"] and how is None:
        raise UserError(f"{db}: {len(plan['clashes'])} groups of error types clash (listed above); nothing was "
                        "changed: run again with --merge-clashes or --rename-clashes.")
    store = _open(labels_db, resolve_clashes=how)
    if store.migrated:
        _print(f"migrated from schema {store.migrated[0]}; the copy made before is {store.migrated[1]}")
