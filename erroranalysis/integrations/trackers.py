"""`--log-to mlflow|wandb|tensorboard`: a run, a comparison or a training run's timeline sent to the experiment
trackers people already read, each as one tracker run.

What is logged (names: `tracker_values`): the overall and per-class metrics and the error clusters' sizes as
numbers (a timeline: one step per training step), the per-class and cluster tables as tables, and the HTML report
(`erroranalysis report`) as an artifact. Each tracker is configured the way it always is: MLflow by
MLFLOW_TRACKING_URI, W&B by WANDB_MODE / WANDB_API_KEY / WANDB_DIR (offline mode writes local files); TensorBoard
writes event files under `--log-dir`. A tracker that is not installed is refused before any work, with the
command that installs it.
"""

from __future__ import annotations

import importlib.util
import tempfile
from dataclasses import dataclass
from pathlib import Path

from erroranalysis.core.errors import UserError
from erroranalysis.core.params import Flag, Params, Strings, Text, param
from erroranalysis.integrations import tracker_values as tv

TRACKERS = ("mlflow", "wandb", "tensorboard")
PACKAGES = {"mlflow": ("mlflow", "MLflow"), "wandb": ("wandb", "Weights & Biases"),
            "tensorboard": ("tensorboard", "TensorBoard")}
PANEL = "Experiment trackers"
TABLE_ROWS = 200  # rows of a table TensorBoard shows as text


@dataclass(frozen=True)
class TrackerParams(Params):
    """Which experiment trackers receive the results, and under which names."""

    log_to: tuple[str, ...] = param((), Strings(repeat=True, choices=TRACKERS), "Log the results to an experiment "
                                    "tracker: mlflow, wandb or tensorboard (repeatable).", panel=PANEL)
    log_project: str = param("erroranalysis", Text(), "The MLflow experiment and the W&B project to log to.",
                             panel=PANEL)
    log_dir: str | None = param(None, Text(), "Folder of TensorBoard's event files (one subfolder per run).",
                                none="./tensorboard", panel=PANEL)
    log_report: bool = param(True, Flag(), "Log the HTML report as an artifact (MLflow, W&B).", panel=PANEL)

    def require(self) -> None:
        """Refuse a tracker that is not installed, with the command that installs it."""
        for name in self.log_to:
            module, title = PACKAGES[name]
            if importlib.util.find_spec(module) is None:
                raise UserError(f"--log-to {name} needs {title}: pip install 'erroranalysis-ml[{name}]'.")


class Tracker:
    """One tracker run: numbers (at a step), tables, a file."""

    def metrics(self, values: dict[str, float], step: int | None = None) -> None:
        raise NotImplementedError

    def table(self, key: str, frame) -> None:
        raise NotImplementedError

    def artifact(self, path: Path) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class MlflowTracker(Tracker):
    def __init__(self, name: str, params: TrackerParams, config: dict):
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient()
        experiment = self.client.get_experiment_by_name(params.log_project)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(params.log_project)
        self.run_id = self.client.create_run(experiment_id, run_name=name, tags={"tool": "erroranalysis"}).info.run_id
        for key, value in list(config.items())[:100]:
            self.client.log_param(self.run_id, key, str(value)[:500])

    def metrics(self, values, step=None):
        import time

        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        items = [Metric(k, v, stamp, step or 0) for k, v in values.items()]
        for i in range(0, len(items), 1000):  # MLflow takes at most 1000 metrics per batch
            self.client.log_batch(self.run_id, metrics=items[i:i + 1000])

    def table(self, key, frame):
        self.client.log_table(self.run_id, data=frame, artifact_file=f"{key}.json")

    def artifact(self, path):
        self.client.log_artifact(self.run_id, str(path), "erroranalysis")

    def close(self):
        self.client.set_terminated(self.run_id)


class WandbTracker(Tracker):
    def __init__(self, name: str, params: TrackerParams, config: dict):
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=params.log_project, name=name, config=config, job_type="erroranalysis",
                              reinit="create_new")
        self.step = None

    def metrics(self, values, step=None):
        self.run.log(dict(values), step=step)

    def table(self, key, frame):
        self.run.log({key: self.wandb.Table(dataframe=frame)})

    def artifact(self, path):
        artifact = self.wandb.Artifact(f"report-{tv.safe(self.run.name).replace(' ', '_')}",
                                       type="erroranalysis-report")
        artifact.add_file(str(path))
        self.run.log_artifact(artifact)

    def close(self):
        self.run.finish()


class TensorBoardTracker(Tracker):
    def __init__(self, name: str, params: TrackerParams, config: dict):
        from torch.utils.tensorboard import SummaryWriter

        folder = Path(params.log_dir or "tensorboard") / tv.safe(name)
        self.writer = SummaryWriter(log_dir=str(folder))
        self.folder = folder
        self.writer.add_text("ea/config", "\n".join(f"- {k}: {v}" for k, v in config.items()) or "-")

    def metrics(self, values, step=None):
        for key, value in values.items():
            self.writer.add_scalar(key, value, global_step=step or 0)

    def table(self, key, frame):
        self.writer.add_text(key, markdown(frame.head(TABLE_ROWS)))

    def artifact(self, path):  # TensorBoard keeps no files: say where the report is
        self.writer.add_text("ea/report", f"HTML report: {Path(path).resolve()}")

    def close(self):
        self.writer.close()


BACKENDS = {"mlflow": MlflowTracker, "wandb": WandbTracker, "tensorboard": TensorBoardTracker}


def markdown(frame) -> str:
    """A table as Markdown, which TensorBoard's text plugin draws."""
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    rows = ["| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def open_trackers(params: TrackerParams, name: str, config: dict | None = None) -> list[Tracker]:
    params.require()
    return [BACKENDS[t](name, params, config or {}) for t in dict.fromkeys(params.log_to)]


def send(trackers: list[Tracker], values: dict, tables: dict, step: int | None = None, report: Path | None = None):
    for tracker in trackers:
        tracker.metrics(values, step)
        for key, frame in tables.items():
            tracker.table(key, frame)
        if report is not None:
            tracker.artifact(report)


def close(trackers: list[Tracker]) -> None:
    for tracker in trackers:
        tracker.close()


def log_run(run_path, params: TrackerParams, *, labels_db=None) -> list[str]:
    """Log one run: its numbers, tables and (with `log_report`) its HTML report. Returns the trackers used."""
    if not params.log_to:
        return []
    from erroranalysis import stages
    from erroranalysis.rundir import Run, readers

    run = Run.open(run_path)
    metrics = readers.read_metrics(run)
    clusters = readers.read_clusters(run, optional=True)
    config = {"run": str(run.path), "task": run.task, "model": (run.manifest.get("model") or {}).get("path"),
              "data": (run.manifest.get("data") or {}).get("path")}
    trackers = open_trackers(params, run.name, config)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            report = stages.write_run_report(run.path, Path(tmp) / f"{run.name}.html", labels_db=labels_db) \
                if params.log_report else None
            send(trackers, tv.run_values(metrics, clusters), tv.run_tables(metrics, clusters), report=report)
    finally:
        close(trackers)
    return list(params.log_to)


def log_compare(report, params: TrackerParams) -> list[str]:
    """Log a comparison (`stages.compare_runs`): per candidate the deltas and counts, the per-class table and
    (with `log_report`) the comparison's HTML page."""
    if not params.log_to:
        return []
    from erroranalysis import stages

    doc = report.doc
    name = f"compare {doc['baseline']} vs " + ", ".join(c["candidate"] for c in doc["comparisons"])
    trackers = open_trackers(params, name, {"baseline": doc["baseline"], "runs": [r["path"] for r in doc["runs"]]})
    try:
        with tempfile.TemporaryDirectory() as tmp:
            html = stages.write_compare_html(report, Path(tmp) / "compare.html") if params.log_report else None
            send(trackers, tv.compare_values(doc), tv.compare_tables(doc), report=html)
    finally:
        close(trackers)
    return list(params.log_to)


def log_timeline(doc: dict, params: TrackerParams) -> list[str]:
    """Log a training run's timeline: each analyzed step's values at its step, then the error-type table."""
    if not params.log_to:
        return []
    trackers = open_trackers(params, Path(doc["experiment"]).name, {"experiment": doc["experiment"],
                                                                     "task": doc["task"]})
    try:
        for row in doc["steps"]:
            if "problem" not in row:
                send(trackers, tv.step_values(doc, row["step"]), {}, step=int(row["step"]))
        send(trackers, {}, tv.timeline_tables(doc))
    finally:
        close(trackers)
    return list(params.log_to)


class StepLogger:
    """`watch --log-to`: each step the watcher analyzes, logged at its step to one tracker run per experiment."""

    def __init__(self, params: TrackerParams, experiment: Path):
        self.params, self.experiment = params, Path(experiment)
        self.trackers: list[Tracker] | None = None
        self.doc: dict | None = None

    def __call__(self, outcome, doc: dict) -> None:
        if not self.params.log_to:
            return
        if self.trackers is None:
            self.trackers = open_trackers(self.params, self.experiment.name, {"experiment": str(self.experiment)})
        self.doc = doc
        send(self.trackers, tv.step_values(doc, outcome.step), {}, step=int(outcome.step))

    def close(self) -> None:
        if self.trackers:
            send(self.trackers, {}, tv.timeline_tables(self.doc))
            close(self.trackers)
        self.trackers = None
