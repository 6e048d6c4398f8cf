"""Where a run's paths may lead: the readers' allow-list and the writers' confinement rule.

Readers (`rundir.readers`) apply an allow-list before they open a file:

    with readers.confined([runs_folder, *allowed_folders]):   # the app, around every page
        readers.read_predictions(run)       # OutsideError if the file (or the manifest) leads out of them

A path is allowed when its real path (symlinks followed, `..` collapsed) lies inside one of the roots, resolved
when `confined` is entered. The answer depends on the path alone, not on whether anything exists there, so a refusal
reveals nothing. Outside `confined` (the CLI, scripts) nothing is checked. The app's rule of which roots
(`erroranalysis_ui.eaui.workspace`) is the only caller today.

Writers apply one rule, always (`entry`): every path they take from a run directory (a commit record's staging
folder and files, artifact names, `.staging`, `.lock`, `manifest.json`, an experiment's step folders) is a relative
path of plain names inside it with no symlink on the way, else OutsideError naming the run and the entry, raised
before anything is changed. A run directory is untrusted input: runs live in shared folders, and one edited
manifest must not make a command delete or move a file anywhere else (docs/run-directory.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from erroranalysis.core.errors import RunError

# The folders (or single files) readers may open in this context, as real paths; None: anywhere. A ContextVar, so
# an app confines the script run of one session without touching another thread (or a test's own reads).
_ALLOWED: ContextVar[tuple[str, ...] | None] = ContextVar("erroranalysis_allowed_roots", default=None)


class OutsideError(RunError):
    """A file whose real path lies outside the folders this process may read (see `confined`)."""


def real_roots(roots: Iterable[str | Path]) -> tuple[str, ...]:
    return tuple(os.path.realpath(os.path.expanduser(str(r))) for r in roots)


@contextmanager
def confined(roots: Iterable[str | Path]) -> Iterator[None]:
    """Within the block, every reader (of this thread or task) opens only files whose real path (symlinks
    followed, `..` collapsed) lies inside `roots`: the app's runs folder and the folders named on its command line.
    Nothing a run holds (its manifest, a symlink) widens the set."""
    token = _ALLOWED.set(real_roots(roots))
    try:
        yield
    finally:
        _ALLOWED.reset(token)


def check_allowed(path: str | Path, allowed_roots: Iterable[str | Path] | None = None) -> Path:
    """`path` when its real path lies inside `allowed_roots` (default: the roots of `confined`, if any), else
    OutsideError. The answer does not depend on whether the path exists, so a refusal reveals nothing about it."""
    roots = _ALLOWED.get() if allowed_roots is None else real_roots(allowed_roots)
    if roots is None:
        return Path(path)
    real = os.path.realpath(os.path.expanduser(str(path)))
    if not any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots):
        raise OutsideError(f"{path}: outside the folders that may be read here; it was not opened.")
    return Path(path)


def check_tree(file: Path, allowed_roots) -> None:
    """check_allowed on a file, or on a folder of shards and every entry in it."""
    check_allowed(file, allowed_roots)
    if allowed_roots is None and _ALLOWED.get() is None:
        return
    if file.is_dir():
        for entry in file.rglob("*"):
            check_allowed(entry, allowed_roots)


# -- the writers' rule ------------------------------------------------------------------------------------------


def entry(folder: str | Path, name, what: str = "entry") -> Path:
    """The path of `name`, an entry taken from a run directory (an artifact or staging folder of a commit plan, a
    step folder of an experiment, `.staging`, `.lock`), inside `folder`: the one rule every writer applies.

    `name` must be a relative path of plain components (no absolute path, no `..`, no `.`, no NUL, no backslash),
    and no component on the way, the last included, may be a symlink; else OutsideError naming the folder and the
    entry, raised before anything is changed. The folder itself is the user's (it may be a symlink); what lies
    below it is the run's, and the run is untrusted input."""
    folder = Path(folder)
    if not isinstance(name, str) or not name:
        _refuse(folder, what, name, "is not a file name")
    parts = name.split("/")
    if name.startswith("/") or os.path.isabs(name):
        _refuse(folder, what, name, "is an absolute path")
    if any(p in ("", ".", "..") for p in parts) or "\\" in name or "\0" in name:
        _refuse(folder, what, name, "leads out of it (`..`, `.`, an empty part, a backslash or a NUL)")
    here = folder
    for part in parts:
        here = here / part
        if here.is_symlink():
            _refuse(folder, what, name, f"goes through a symlink ({here.relative_to(folder).as_posix()})")
    return here


def entries(folder: str | Path, names, what: str = "entry") -> list[Path]:
    """`entry` for each of `names`, all checked before any is used."""
    return [entry(folder, name, what) for name in names]


def _refuse(folder: Path, what: str, name, reason: str) -> None:
    raise OutsideError(f"{folder}: {what} {name!r} {reason}, and a writer touches nothing outside the run; nothing "
                       "was changed: remove that entry (or restore the run from a copy you trust) and run the command "
                       "again.")
