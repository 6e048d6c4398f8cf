"""The run directory: the contract between stages, the CLI, the UI and users' own scripts.

`manifest.json` is the single commit point. Each stage is recorded there as `running` (with its pid and host),
`committing`, `done`, `failed` or `interrupted`; a `running` or `committing` stage whose process is gone (nobody
holds the run's lock) reads as `interrupted`, with the command that resumes it. Artifacts are committed with their
stage (`rundir.commit`), and readers use an artifact only when the stage that wrote it is `done`
(`rundir.readers`). See docs/run-directory.md.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shlex
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from erroranalysis import __version__
from erroranalysis.core import files, storage
from erroranalysis.core.errors import RunError
from erroranalysis.rundir import commit, confine, swap
from erroranalysis.rundir.artifacts import COMMANDS, INPUTS, MANIFEST, SOURCE_STAGES, STAGE_ARTIFACTS, STAGING
from erroranalysis.rundir.lock import RunLock, host, writer_alive

SCHEMA_VERSION = 2
LIVE = ("running", "committing")
RUN_ID = re.compile(r"[0-9a-f]{32}")

# The command line of this process, recorded in the manifest of a run it creates (so "resume" can repeat it).
COMMAND: list[str] | None = None


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class Run:
    """A run directory. `create_run` starts one; `Run.open` opens an existing one."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.remote: str | None = None  # the URL a run built in a local mirror is published to (rundir.remote)

    @property
    def location(self) -> str:
        """Where the run lives, for messages: its URL when it is published to object storage, else its folder."""
        return self.remote or str(self.path)

    @classmethod
    def open(cls, path: str | Path) -> Run:
        path = Path(path)
        if not path.is_dir():
            raise RunError(f"{path}: no such run directory; create one with 'erroranalysis run' or 'analyze'.")
        if not (path / MANIFEST).is_file():
            raise RunError(f"{path}: not a run directory (no {MANIFEST}); point at a folder made by 'erroranalysis run'.")
        run = cls(path)
        run.manifest  # noqa: B018 (reading it validates it early)
        return run

    # -- manifest -------------------------------------------------------------------------------------------

    @property
    def manifest(self) -> dict:
        file = self.path / MANIFEST
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RunError(f"{file}: unreadable manifest ({str(exc).splitlines()[0]}); re-create the run.") from None
        if not isinstance(data, dict):
            raise RunError(f"{file}: not a run manifest (a JSON object); re-create the run.")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            if isinstance(version, int) and version < SCHEMA_VERSION:
                raise RunError(f"{file}: schema_version {version} is from an older erroranalysis; upgrade the run "
                               f"with 'erroranalysis migrate {self.path}'.")
            raise RunError(f"{file}: schema_version {version!r} is not supported (expected {SCHEMA_VERSION}); "
                           "use the erroranalysis version that made it.")
        return data

    def _write(self, data: dict) -> None:
        files.write_json(self.path / MANIFEST, data)

    def lock(self) -> RunLock:
        return RunLock(self.path, self._busy)

    def _busy(self) -> str:
        try:
            stages = self.manifest.get("stages", {})
        except RunError:
            return "another process is writing it"
        live = [(n, s) for n, s in stages.items() if s.get("status") in LIVE]
        if not live:
            return "another process is writing it"
        name, s = live[-1]
        return f"stage {name!r} is running (pid {s.get('pid')} on {s.get('host')}, since {s.get('started')})"

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def id(self) -> str | None:
        """The id written into the manifest when the run was created (32 hex digits; kept by --overwrite), or None
        for a run made before ids: what keys the labels of a run kept outside its labels database's folder."""
        value = self.manifest.get("run_id")
        return value if isinstance(value, str) and RUN_ID.fullmatch(value) else None

    @property
    def labels(self) -> list[str]:
        return list(self.manifest.get("labels", []))

    @property
    def task(self) -> str:
        return self.manifest.get("task", "classification")

    # -- stage states ---------------------------------------------------------------------------------------

    def state(self, name: str, manifest: dict | None = None) -> dict | None:
        """The stage's manifest entry with its effective `status` (`interrupted` for a live status whose process
        is gone), or None when it never ran."""
        entry = (manifest or self.manifest).get("stages", {}).get(name)
        if entry is None:
            return None
        entry = dict(entry)
        if entry.get("status") in LIVE and not writer_alive(self.path):
            entry["recorded_status"], entry["status"] = entry["status"], "interrupted"
        return entry

    def stage_status(self, name: str) -> str | None:
        entry = self.state(name)
        return entry.get("status") if entry else None

    def source_stage(self, manifest: dict | None = None) -> str:
        """The stage that made the run's predictions (infer or load_predictions)."""
        stages = (manifest or self.manifest).get("stages", {})
        return next((s for s in SOURCE_STAGES if s in stages), SOURCE_STAGES[0])

    def resume_command(self, name: str) -> str:
        if name in COMMANDS:
            return COMMANDS[name].format(run=shlex.quote(str(self.path)))
        command = self.manifest.get("command")
        if command:
            return command if "--overwrite" in command else f"{command} --overwrite"
        return "re-create the run with 'erroranalysis run' or 'analyze' (--overwrite)"

    def explain(self, name: str, manifest: dict | None = None) -> str | None:
        """Why stage `name`'s outputs cannot be used, naming the stage to run; None when it is done."""
        manifest = manifest or self.manifest
        for needed in INPUTS.get(name, ()):
            upstream = self.source_stage(manifest) if needed == "source" else needed
            reason = self.explain(upstream, manifest)
            if reason:
                return reason
        entry = self.state(name, manifest)
        status = entry.get("status") if entry else None
        if status == "done":
            return None
        command = self.resume_command(name)
        if status is None:
            return f"stage {name!r} was not run; run: {command}"
        if status in LIVE:
            return (f"stage {name!r} is running (pid {entry.get('pid')} on {entry.get('host')}, since "
                    f"{entry.get('started')}); wait for it to finish")
        if status == "interrupted" and entry.get("recorded_status") == "committing":
            try:
                commit.check_plan(self.path, name, entry.get("commit"))
            except RunError as exc:  # a crafted record: no command should be suggested that would act on it
                return f"stage {name!r} has a commit record no writer will apply ({str(exc).split('; ')[0]})"
            return (f"stage {name!r} was stopped while saving its files (pid {entry.get('pid')} on "
                    f"{entry.get('host')}); any command that writes this run finishes saving them, e.g.: {command}")
        if status == "interrupted":
            return (f"stage {name!r} was interrupted (pid {entry.get('pid')} on {entry.get('host')}, started "
                    f"{entry.get('started')}); resume with: {command}")
        return f"stage {name!r} failed ({entry.get('error')}); fix that and run: {command}"

    def notice(self, name: str) -> str | None:
        """When stage `name` has committed outputs but its latest attempt is not done: what happened, for a warning
        beside the (older) outputs shown; None otherwise."""
        manifest = self.manifest
        entry = self.state(name, manifest)
        committed = any(a.get("stage") == name for a in manifest.get("artifacts", {}).values())
        if not entry or entry.get("status") == "done" or not committed:
            return None
        return f"{self.explain(name, manifest)}; its outputs shown are those of its last completed run"

    def require(self, name: str) -> None:
        reason = self.explain(name)
        if reason:
            raise RunError(f"{self.path}: {reason}")

    # -- running a stage ------------------------------------------------------------------------------------

    @contextmanager
    def stage(self, name: str, params: dict | None = None) -> Iterator[commit.Staging]:
        """Run stage `name`: record it running, yield its staging area, commit its artifacts with it.

        An exception marks it failed (KeyboardInterrupt and SIGTERM: interrupted) and leaves the previous
        artifacts as they were."""
        with self.lock():
            self.check_writable(name)
            self.recover()
            commit.sweep(self.path, name)
            start = time.perf_counter()
            staging = None
            try:  # from the first write on: a signal while the staging folder is made still marks the stage
                self._set(name, {"status": "running", "params": params or {}, "started": now_iso(),
                                 "pid": os.getpid(), "host": host()}, replace=True)
                staging = commit.Staging(self.path, name)
                yield staging
                plan = staging.plan()
            except BaseException as exc:
                self._stopped(name, staging, exc, time.perf_counter() - start)
                raise
            done = {"status": "done", "params": params or {}, "seconds": round(time.perf_counter() - start, 3),
                    "finished": now_iso(), **staging.facts}
            self._commit(name, {**plan, "done": done})

    def _stopped(self, name: str, staging, exc: BaseException, seconds: float) -> None:
        """Undo stage `name` stopped by `exc` before its commit: its staging folder goes, and its entry says failed
        or interrupted when the manifest records this attempt (the first write may have failed); DiskFullError."""
        if staging is None:
            commit.sweep(self.path, name)
        else:
            staging.discard()
        entry = self.manifest.get("stages", {}).get(name) or {}
        if entry.get("status") == "running" and entry.get("pid") == os.getpid() and entry.get("host") == host():
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self._set(name, {"status": "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed",
                             "error": text, "seconds": round(seconds, 3), "finished": now_iso()})
        if files.is_disk_full(exc):
            raise files.DiskFullError(f"{self.path}: stage {name!r} stopped, {files.disk_full_reason(exc)}; its "
                                      "previous files are kept; free some space and run it again.") from None

    def _commit(self, name: str, plan: dict) -> None:
        commit.check_plan(self.path, name, plan)
        self._set(name, {"status": "committing", "commit": plan})
        commit.apply(self.path, plan)
        data = self.manifest
        artifacts = data.setdefault("artifacts", {})
        for artifact in plan["remove"]:
            artifacts.pop(artifact, None)
        for artifact in plan["write"]:
            artifacts[artifact] = {"stage": name, **plan["digests"][artifact], "written": plan["done"]["finished"]}
        data["stages"][name] = plan["done"]
        data.update(plan.get("manifest") or {})  # what the stage settled, with its artifacts (commit.Staging)
        self._write(data)
        commit.finish(self.path, plan)

    def check_writable(self, stage: str | None = None) -> None:
        """Refuse (OutsideError, RunError), before anything is changed, a run a writer must not touch: a manifest,
        staging folder or artifact of `stage` that is a symlink, or a commit left half done whose plan leads out of
        the run or names files its stage does not write (the confinement rule, `confine.entry`;
        `commit.check_plan`)."""
        confine.entries(self.path, [MANIFEST, STAGING, *STAGE_ARTIFACTS.get(stage, ())], "entry")
        for name, plan in self._pending():
            commit.check_plan(self.path, name, plan)

    def _pending(self) -> list[tuple[str, dict]]:
        stages = self.manifest.get("stages", {})
        if not isinstance(stages, dict):
            raise RunError(f"{self.path / MANIFEST}: 'stages' is not an object; re-create the run.")
        return [(name, entry["commit"]) for name, entry in stages.items()
                if isinstance(entry, dict) and entry.get("status") == "committing" and "commit" in entry]

    def recover(self) -> None:
        """Roll forward the commits a killed process left half done (call with the lock held). Every plan is
        checked before any is applied, so a crafted manifest changes nothing."""
        self.check_writable()
        for name, plan in self._pending():
            self._commit(name, plan)

    def _set(self, name: str, fields: dict, replace: bool = False) -> None:
        data = self.manifest
        stages = data.setdefault("stages", {})
        entry = {} if replace else stages.get(name, {})
        entry.pop("error", None)
        entry.pop("commit", None)
        entry.update(fields)
        stages[name] = entry
        self._write(data)

    # -- artifacts ------------------------------------------------------------------------------------------

    def file(self, name: str) -> Path:
        return self.path / name

    def has(self, name: str) -> bool:
        """Whether artifact `name` is committed and the stage that wrote it is done."""
        from erroranalysis.rundir.readers import usable

        return usable(self, name)

    # the typed readers, as methods for convenience (one implementation: rundir.readers)
    def predictions(self, columns: list[str] | None = None):
        from erroranalysis.rundir import readers

        return readers.read_predictions(self, columns=columns)

    def probs(self):
        from erroranalysis.rundir import readers

        return readers.read_probs(self)

    def hidden_states(self):
        from erroranalysis.rundir import readers

        return readers.read_hidden(self)

    def metrics(self) -> dict:
        from erroranalysis.rundir import readers

        return readers.read_metrics(self)


@contextmanager
def create_run(path: str | Path, *, overwrite: bool = False, **manifest: Any) -> Iterator[Run]:
    """Create a run and hold it for writing while the block runs.

    With `overwrite`, an existing run is replaced only when the block succeeds: the new one is built beside it and
    the two trade places at the end, so a failed or killed overwrite leaves the old run intact. A URL (s3://, gs://,
    az://) is built in a local mirror and published when the block succeeds (`rundir.remote`)."""
    if storage.is_url(path):
        from erroranalysis.rundir import remote

        with remote.create_remote_run(path, overwrite=overwrite, create_local=create_run, **manifest) as run:
            yield run
        return
    final = Path(path)
    existing = check_out(final, overwrite)
    final.parent.mkdir(parents=True, exist_ok=True)
    swap.remove_stale_builds(final, writer_alive)
    if existing:  # the replacement is the same run: its labels stay its own
        manifest.setdefault("run_id", _kept_id(final))
    if not existing:
        final.mkdir(exist_ok=True)
        files.sync_dir(final.parent)
        run = Run(final)
        with run.lock():
            run._write(_new_manifest(manifest))
            yield run
        return
    with Run(final).lock():  # nobody writes the old run while its replacement is built
        build = swap.building_path(final)
        build.mkdir()
        run = Run(build)
        try:
            with run.lock():
                run._write(_new_manifest(manifest))
                yield run
                swap.exchange(build, final)
                files.sync_dir(final.parent)
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            raise
        run.path = final
        shutil.rmtree(build, ignore_errors=True)  # now the old run


def check_out(path: Path, overwrite: bool) -> bool:
    """Whether a run may be created at `path` (RunError if not); True when it replaces an existing run. Commands
    that do long work before creating their run call it first, so a clash fails at once."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RunError(f"{path}: exists and is not a directory; choose another --out.",
                       python=f"{path}: exists and is not a directory; choose another out.")
    existing = path.is_dir() and any(path.iterdir())
    if existing and not (path / MANIFEST).exists():
        raise RunError(f"{path}: directory is not empty and is not a run; choose another --out.",
                       python=f"{path}: directory is not empty and is not a run; choose another out.")
    if existing and not overwrite:
        raise RunError(f"{path}: a run already exists here; pass --overwrite to replace it.",
                       python=f"{path}: a run already exists here; pass overwrite=True to replace it.")
    return existing


def _kept_id(path: Path) -> str | None:
    """The id of the run an overwrite replaces: None for a run made before ids (its labels stay keyed by its path),
    a new one when its manifest cannot be read."""
    try:
        return Run(path).id
    except RunError:
        return uuid.uuid4().hex


def _new_manifest(fields: dict) -> dict:
    base = {
        "schema_version": SCHEMA_VERSION,
        "run_id": uuid.uuid4().hex,
        "tool": {"name": "erroranalysis", "version": __version__},
        "created": now_iso(),
        "command": shlex.join(COMMAND) if COMMAND else None,
        "stages": {},
        "artifacts": {},
        "versions": package_versions(),
        "python": sys.version.split()[0],
    }
    base.update(fields)
    return base


def package_versions() -> dict[str, str]:
    """Versions of the packages that decide results, without importing them."""
    from importlib import metadata

    names = ["numpy", "pandas", "scikit-learn", "torch", "transformers", "umap-learn", "hdbscan"]
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions
