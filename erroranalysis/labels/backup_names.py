"""Where backups of the labels database are, by name: `<name>-backup-<UTC time>.sqlite` (`erroranalysis labels
backup`), `<name>-before-schema-<N>-<UTC time>.sqlite` (before a schema migration), `<name>-replaced-<UTC
time>.sqlite` (what a restore replaced). What the connection's error messages and the backup module both need, so
neither imports the other."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path


def stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def free_name(folder: Path, stem: str) -> Path:
    path, n = folder / f"{stem}.sqlite", 2
    while path.exists():
        path, n = folder / f"{stem}-{n}.sqlite", n + 1
    return path


def default_backup_path(db: Path) -> Path:
    return free_name(db.parent, f"{db.stem}-backup-{stamp()}")


def migration_backup_path(db: Path, old: int, new: int) -> Path:
    return free_name(db.parent, f"{db.stem}-before-schema-{new}-{stamp()}")


def find_backups(db: str | Path) -> list[Path]:
    """Backups of `db` beside it, newest first (by modification time)."""
    db = Path(db)
    found = [p for pattern in (f"{db.stem}-backup-*.sqlite", f"{db.stem}-before-schema-*.sqlite")
             for p in db.parent.glob(pattern)]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def restore_hint(db: Path) -> str:
    """How to get the labels back, for error messages (one clause)."""
    backups = find_backups(db) if db.parent.is_dir() else []
    if backups:
        return f"restore the newest backup: erroranalysis labels restore {backups[0]} --labels-db {db}"
    return (f"no backup was found beside it: restore a copy with 'erroranalysis labels restore COPY --labels-db "
            f"{db}', or move it away to start an empty one")
