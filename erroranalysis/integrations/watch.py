"""Checkpoint watching: analyze each `checkpoint-*` folder a training run saves, as it lands.

    watcher = Watcher("out/", "eval.jsonl", runs="runs/my-experiment", data_opts=DataOptions(id_column="id"))
    watcher.once()        # every complete checkpoint present; waits for ones still being written
    watcher.forever()     # and each new one, until interrupted

A checkpoint is analyzed only when it is complete (`checkpoint_ready`): its config.json parses, its safetensors
files are whole (header and size), and either its trainer_state.json (the Trainer writes it last) parses and no
file changed since the previous scan, or no file changed for `settle` seconds (a copy without a trainer state).
A checkpoint with pickled weights only (`*.bin`, `*.pt`) is never analyzed (loading it could run code): it is said at
once, with the fix, and not waited for. `checkpoint-500` becomes the run `step-000500`, as the callback names it; a step whose run is complete is not
analyzed again, so a watcher can be restarted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from erroranalysis import stages
from erroranalysis import timeline as tl
from erroranalysis.core.errors import ModelError, UserError
from erroranalysis.core.validation import check_choice, check_number
from erroranalysis.rundir import MANIFEST, TRAINER_STATE, Run
from erroranalysis.sources.table import DataOptions, read_eval_set

Snapshot = tuple  # ((relative path, size, mtime_ns), ...)


def snapshot(folder: Path) -> Snapshot:
    """Every file under `folder` with its size and modification time, in name order."""
    out = []
    for path in sorted(folder.rglob("*")):
        try:
            if path.is_file():
                stat = path.stat()
                out.append((path.relative_to(folder).as_posix(), stat.st_size, stat.st_mtime_ns))
        except OSError:  # removed while listed (the Trainer rotates old checkpoints)
            continue
    return tuple(out)


def checkpoint_ready(folder: Path, previous: Snapshot | None, *, settle: float, now: float | None = None
                     ) -> tuple[bool, str, Snapshot]:
    """(ready, why not, the folder's snapshot). `previous` is the snapshot of the last scan (None at the first).
    A checkpoint that will not be analyzed however long one waits (pickled weights only) raises
    PickledWeightsError at once."""
    from erroranalysis.infer.classifier import PickledWeightsError, check_checkpoint

    now = time.time() if now is None else now
    current = snapshot(folder)
    names = {name for name, _, _ in current}
    if "config.json" not in names:
        return False, "no config.json yet", current
    try:
        json.loads((folder / "config.json").read_text(encoding="utf-8"))
        check_checkpoint(folder, trust_remote_code=True)  # only that the files are whole; remote code is refused later
    except PickledWeightsError:
        raise
    except (OSError, ValueError, ModelError) as exc:
        return False, f"incomplete ({str(exc).splitlines()[0]})", current
    newest = max((m for _, _, m in current), default=0) / 1e9
    if TRAINER_STATE in names:
        try:
            json.loads((folder / TRAINER_STATE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False, f"{TRAINER_STATE} is being written", current
        if previous == current:
            return True, "", current
        if previous is None and now - newest >= settle:
            return True, "", current
        return False, "files changed since the last look", current
    if now - newest >= settle:
        return True, "", current
    return False, f"files changed {now - newest:.0f} s ago (waiting until they are {settle:g} s old)", current


@dataclass
class Outcome:
    """What happened to one checkpoint."""

    step: int
    checkpoint: Path
    run: Path | None = None
    seconds: float = 0.0
    error: str | None = None
    regressions: list = field(default_factory=list)
    base: str | None = None


class Watcher:
    """Analyze the checkpoints of `output_dir` into step runs under `runs` (see the module docstring)."""

    def __init__(self, output_dir: str | Path, data: str | Path, *, runs: str | Path | None = None,
                 data_opts: DataOptions = DataOptions(), task: str = "classification", infer=None,
                 generation=None, after=None, keep_hidden: bool = False, taxonomy="auto", settle: float = 10.0,
                 poll: float = 2.0, gate: bool = False, alpha: float = 0.05,
                 say: Callable[[str], None] = print, reuse: bool = True,
                 on_step: Callable[[Outcome, dict], None] | None = None):
        from erroranalysis.infer.generation import GenerationParams
        from erroranalysis.integrations.reuse import IncrementalReducer, MemoryMiniLM

        check_choice("task", task, ("classification", "generation"))
        check_number("settle", settle, 0)
        check_number("poll", poll, 0, low_open=True)
        self.output_dir = Path(output_dir)
        if not self.output_dir.is_dir():
            raise UserError(f"{self.output_dir}: no such folder; pass the Trainer's output_dir (where checkpoint-* "
                            "folders appear).")
        self.data = Path(data)
        self.runs = Path(runs) if runs is not None else Path("runs") / self.output_dir.resolve().name
        self.data_opts, self.task = data_opts, task
        self.infer = (infer or stages.InferParams()).replace(hidden="float16" if keep_hidden else "none")
        self.generation = generation or GenerationParams()
        after = after or stages.AfterParams(checks=None)
        cluster = after.cluster
        if reuse and cluster is not None and isinstance(cluster.reducer, str):
            after = after.replace(cluster=cluster.replace(reducer=IncrementalReducer(
                cluster.reducer, n_components=cluster.n_components, n_neighbors=cluster.n_neighbors,
                seed=cluster.seed)))
        self.after = after
        self.embedder = MemoryMiniLM(batch_size=cluster.embed_batch_size, cache=cluster.cache) \
            if reuse and cluster is not None and cluster.embedder == "minilm" else None
        self.taxonomy, self.settle, self.poll = taxonomy, settle, poll
        self.gate, self.alpha, self.say = gate, alpha, say
        self.on_step = on_step  # called with each analyzed step and the timeline then (--log-to)
        # the eval set is read now, so bad data fails before any waiting
        self.prompts = stages.prepare_prompts(self.data, data_opts, self.generation) if task == "generation" else None
        if task == "classification":
            read_eval_set(self.data, data_opts)
        self._seen: dict[str, Snapshot] = {}
        self._told: dict[str, str] = {}
        self._failed: dict[str, Snapshot] = {}

    # -- scanning ---------------------------------------------------------------------------------------------

    def checkpoints(self) -> list[tuple[int, Path]]:
        found = [(tl.checkpoint_step(p.name), p) for p in self.output_dir.iterdir() if p.is_dir()]
        return sorted((s, p) for s, p in found if s is not None)

    def analyzed(self, step: int, folder: Path) -> bool:
        """Whether the step's run is complete and was made from this checkpoint folder (or by the callback)."""
        path = self.runs / tl.step_name(step)
        if not (path / MANIFEST).is_file():
            return False
        try:
            run = Run.open(path)
            manifest = run.manifest
        except UserError:
            return False
        training = manifest.get("training") or {}
        source_ok = training.get("source") == "callback" or training.get("checkpoint") == str(folder.resolve())
        return source_ok and all(run.explain(name, manifest) is None for name in manifest.get("stages", {}))

    def scan(self) -> tuple[list[tuple[int, Path]], dict[str, str], list[Outcome]]:
        """(checkpoints ready to analyze, {checkpoint name: why it is not ready yet}, the checkpoints refused as
        they are, such as pickle-only ones: not analyzed, said at once, not waited for)."""
        from erroranalysis.infer.classifier import PickledWeightsError

        ready, pending, refused = [], {}, []
        for step, folder in self.checkpoints():
            if self.analyzed(step, folder):
                continue
            try:
                ok, why, snap = checkpoint_ready(folder, self._seen.get(folder.name), settle=self.settle)
            except PickledWeightsError as exc:
                ok, why, snap = None, str(exc).splitlines()[0], snapshot(folder)
            self._seen[folder.name] = snap
            if self._failed.get(folder.name) == snap:
                continue  # it failed as it is; try again once it changes
            if ok is None:
                self._failed[folder.name] = snap
                refused.append(Outcome(step, folder, error=why))
            elif ok:
                ready.append((step, folder))
            else:
                pending[folder.name] = why
        return ready, pending, refused

    # -- analyzing --------------------------------------------------------------------------------------------

    def analyze(self, step: int, folder: Path) -> Outcome:
        start = time.perf_counter()
        outcome = Outcome(step, folder)
        try:
            run = self._run(step, folder)
        except (UserError, OSError) as exc:
            outcome.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self._failed[folder.name] = self._seen.get(folder.name) or snapshot(folder)
            self.say(f"{folder.name}: not analyzed: {outcome.error}")
            return outcome
        outcome.run = run.path
        if self.gate:
            found = stages.gate_step(run, alpha=self.alpha)
            if found is not None:
                outcome.regressions, outcome.base = found.regressions, found.base
        outcome.seconds = time.perf_counter() - start
        self._report(outcome)
        return outcome

    def _run(self, step: int, folder: Path):
        state = _epoch(folder)
        common = {"step": step, "epoch": state, "source": "watch", "checkpoint": folder, "after": self.after,
                  "taxonomy": self.taxonomy, "embedder": self.embedder}
        if self.task == "generation":
            from erroranalysis.infer.causal_lm import load_causal_lm

            g = self.generation
            lm = load_causal_lm(folder, device=g.device, precision=g.precision, trust_remote_code=g.trust_remote_code)
            training_state = _training_state(folder)
            return stages.analyze_generation_step(self.runs, lm, self.prompts, g, training_state=training_state,
                                                  **common)
        found = stages.resolve_task(folder, "auto")
        if found != "classification":
            from erroranalysis.core.errors import ModelError

            raise ModelError(f"{folder}: a {found} head; `watch` analyzes single-label classifiers and causal LMs in "
                             f"this version: run `erroranalysis run --model {folder}` on it.")
        job = stages.prepare_checkpoint(folder, self.data, self.data_opts, self.infer)
        job.training_state = _training_state(folder)  # the checkpoint's log, as the callback keeps the log so far
        return stages.analyze_step(self.runs, job, **common)

    def _report(self, o: Outcome) -> None:
        metrics = Run.open(o.run).metrics()["overall"]
        self.say(f"{o.checkpoint.name} -> {o.run}: accuracy {metrics['accuracy']:.3f}, macro F1 "
                 f"{metrics['macro_f1']:.3f}, {metrics['n_failures']:,} failures ({o.seconds:.1f} s)")
        doc = stages.build_timeline(self.runs)
        for event in doc["events"]:
            if event["step"] == o.step:
                self.say(f"  {event['text']}")
        if o.base is not None:
            if o.regressions:
                self.say(f"  {len(o.regressions)} significant regression(s) against {Path(o.base).name}:")
                for r in o.regressions:
                    self.say(f"    - {r['text']}")
            else:
                self.say(f"  no significant regression against {Path(o.base).name}")
        if self.on_step is not None:
            self.on_step(o, doc)

    # -- loops ------------------------------------------------------------------------------------------------

    def step(self) -> tuple[list[Outcome], dict[str, str]]:
        """One scan: analyze what is ready, in step order; what is still pending."""
        ready, pending, refused = self.scan()
        for name, why in pending.items():
            if self._told.get(name) != why:
                self.say(f"{name}: waiting: {why}")
                self._told[name] = why
        for outcome in refused:
            self.say(f"{outcome.checkpoint.name}: not analyzed: {outcome.error}")
        return refused + [self.analyze(step, folder) for step, folder in ready], pending

    def once(self, wait: float = 600.0) -> tuple[list[Outcome], dict[str, str]]:
        """Analyze every checkpoint present, waiting (up to `wait` seconds) for those still being written;
        (outcomes, the checkpoints still incomplete when the wait ran out)."""
        deadline = time.monotonic() + wait
        outcomes, pending = self.step()
        while pending and time.monotonic() < deadline:
            time.sleep(self.poll)
            more, pending = self.step()
            outcomes += more
        return outcomes, pending

    def forever(self, stop: Callable[[], bool] | None = None) -> list[Outcome]:
        """Analyze each checkpoint as it lands until interrupted (or `stop()` says so)."""
        outcomes: list[Outcome] = []
        while not (stop and stop()):
            more, _ = self.step()
            outcomes += more
            time.sleep(self.poll)
        return outcomes


def _training_state(folder: Path) -> dict | None:
    try:
        return json.loads((folder / TRAINER_STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _epoch(folder: Path) -> float | None:
    state = _training_state(folder) or {}
    epoch = state.get("epoch")
    return float(epoch) if isinstance(epoch, (int, float)) else None
