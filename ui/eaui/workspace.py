"""Which files the app may open: the one rule, and every path the app opens goes through it.

The allowed folders are the runs folder and each folder named with `--allow-path DIR`, resolved (every symlink
followed) when the app starts; the labels database named with `--labels-db` is allowed as one file. A path may be
opened when its real path (`os.path.realpath`: symlinks followed, `..` collapsed) lies inside one of them, checked
just before it is read. Nothing a run holds widens the set: not its manifest's `model.path` or `data.path`, not a
symlink inside it, not a path recorded in one of its artifacts. The library's readers make the same check
(`erroranalysis.rundir.readers.confined`, entered around every page), so a stage the app calls is held to it too.

A refused path gets one answer (`OutsideError`), whatever is or is not there, so refusals reveal nothing about the
machine's files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import Any

from erroranalysis.core.errors import RunError
from erroranalysis.rundir import MANIFEST, Run, readers
from erroranalysis.rundir.readers import OutsideError

__all__ = ["OutsideError", "Workspace"]

MAX_DEPTH = 2  # runs are looked for at <root>/<run> and <root>/<group>/<run>


@dataclass(frozen=True)
class Workspace:
    """The runs folder and the other places the app may read, as real paths."""

    runs_root: Path
    allowed: tuple[Path, ...] = ()    # --allow-path folders
    files: tuple[Path, ...] = ()      # single files named on the command line (--labels-db)

    @classmethod
    def of(cls, runs_root: Path, allow_paths=(), files=()) -> Workspace:
        real = [Path(r) for r in readers.real_roots([runs_root, *allow_paths, *files])]
        n = 1 + len(tuple(allow_paths))
        return cls(real[0], tuple(real[1:n]), tuple(real[n:]))

    @property
    def roots(self) -> tuple[Path, ...]:
        return (self.runs_root, *self.allowed, *self.files)

    def describe(self) -> str:
        """The allowed folders, for messages: the runs folder, then the --allow-path folders."""
        folders = [f"the runs folder {self.runs_root}"] + [str(p) for p in self.allowed]
        return ", ".join(folders)

    # -- the rule ---------------------------------------------------------------------------------------------

    def allows(self, path: str | Path) -> bool:
        try:
            readers.check_allowed(path, self.roots)
        except OutsideError:
            return False
        return True

    def check(self, path: str | Path, shown: str | None = None) -> Path:
        """`path` when it may be opened, else OutsideError naming it as `shown` (what the user typed)."""
        if not self.allows(path):
            raise OutsideError(f"{shown or path}: outside the folders this app may read ({self.describe()}); it "
                               "was not opened. Start the app with --allow-path DIR to read another folder.")
        return Path(path)

    @contextmanager
    def confined(self) -> Iterator[None]:
        """Hold the library's readers to the rule for the block (a page's script run)."""
        with readers.confined(self.roots):
            yield

    def bind(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` run under the rule wherever it is called: Streamlit calls a download button's data callable
        outside the page's script run."""
        @wraps(fn)
        def confined_fn(*args, **kwargs):
            with self.confined():
                return fn(*args, **kwargs)

        return confined_fn

    # -- runs ------------------------------------------------------------------------------------------------

    def discover(self) -> list[str]:
        """Run keys (paths relative to the runs folder, posix) of every run under it, sorted. A folder or manifest
        that leads outside the allowed folders is left out, whether or not its target exists."""
        root = self.runs_root
        keys: set[str] = set()
        level = [root]
        for _ in range(MAX_DEPTH):
            below = []
            for folder in level:
                for child in _subfolders(folder):
                    if child.name.startswith(".") or not self.allows(child):
                        continue
                    below.append(child)
                    manifest = child / MANIFEST
                    if self.allows(manifest) and manifest.is_file():
                        keys.add(child.relative_to(root).as_posix())
            level = below
        return sorted(keys)

    def run_dir(self, key: str) -> Path:
        """The folder of run `key`, refusing anything outside the runs folder (.., absolute paths, a run folder or
        manifest that is, or became, a symlink out)."""
        root = self.runs_root
        if not key or Path(key).is_absolute() or ".." in Path(key).parts:
            raise RunError(f"{key!r}: not a run in {root}; pick a run on the Runs page.")
        path = root / key
        if not self.allows(path) or not self.allows(path / MANIFEST):
            raise OutsideError(f"{key!r}: leads outside the folders this app may read; pick a run on the Runs page.")
        if not (path / MANIFEST).is_file():
            raise RunError(f"{path}: not a run directory (no {MANIFEST}); pick a run on the Runs page.")
        return path

    def open_run(self, path: str | Path) -> Run:
        """Run.open after checking the manifest it reads."""
        self.check(Path(path) / MANIFEST)
        return Run.open(path)

    # -- paths a user types, or a run names ------------------------------------------------------------------

    def typed_path(self, text: str) -> Path:
        """A path typed in the app: relative to the runs folder, or absolute; refused unless inside the allowed
        folders (before anything looks at the file)."""
        target = Path(text.strip()).expanduser()
        if not target.is_absolute():
            target = self.runs_root / target
        return self.check(target, shown=text.strip())

    def named_folder(self, run_path: Path, raw: object) -> Path | None:
        """A folder a run's manifest names (model.path), when it lies inside the allowed folders; else None, without
        looking at it. A relative path is read against the run folder."""
        if not raw:
            return None
        given = Path(str(raw)).expanduser()
        candidate = given if given.is_absolute() else run_path / given
        if not self.allows(candidate):
            return None
        try:
            if candidate.is_dir():
                return candidate
            if candidate.is_file():
                return candidate.parent
        except OSError:
            pass
        return None

    def training_log(self, target: Path) -> tuple[Path, str]:
        """The training log under `target` (a file or folder inside the allowed folders) and its format
        (erroranalysis.checklist.training_log.find_log), refusing a log found through a symlink out."""
        from erroranalysis.checklist.training_log import find_log

        file, kind = find_log(self.check(target))
        self.check(file)
        if file.is_dir():  # a TensorBoard folder: every event file in it
            for entry in file.iterdir():
                self.check(entry)
        return file, kind


def _subfolders(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir())
    except OSError:
        return []
