"""What the Python API returns: a run (and its metrics, comparisons) as objects whose parts are DataFrames.

    run = erroranalysis.open("runs/x")
    run.metrics.per_class          # DataFrame: one row per class
    run.failures                   # DataFrame: the failing examples
    run                            # in Jupyter: an HTML summary (metrics, confusion, top clusters)

Everything is read through the run directory's readers (`erroranalysis.rundir`), when asked for, so an object
always shows the run as it is on disk; nothing here computes what the stages compute.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from erroranalysis.api import summary_html
from erroranalysis.compare import CompareParams, Report
from erroranalysis.core.errors import RunError
from erroranalysis.rundir import Run as RunDirectory
from erroranalysis.rundir import readers


class Metrics:
    """metrics.json as DataFrames; `raw` is the document itself (docs/run-directory.md)."""

    def __init__(self, raw: dict):
        self.raw = raw

    @property
    def overall(self) -> pd.DataFrame:
        """One row per overall metric: value, and the 95% interval where there is one."""
        o = self.raw.get("overall") or {}
        rows = []
        for name, value in o.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                ci = o.get(f"{name}_ci") or (None, None)
                rows.append({"metric": name, "value": value, "ci_low": ci[0], "ci_high": ci[1]})
        return pd.DataFrame(rows, columns=["metric", "value", "ci_low", "ci_high"]).set_index("metric")

    @property
    def per_class(self) -> pd.DataFrame:
        """One row per class: precision, recall, F1 (with its interval), support, predicted."""
        rows = [{**{k: v for k, v in r.items() if k != "f1_ci"},
                 "f1_ci_low": (r.get("f1_ci") or (None, None))[0], "f1_ci_high": (r.get("f1_ci") or (None, None))[1]}
                for r in self.raw.get("per_class") or []]
        return pd.DataFrame(rows).set_index("label") if rows else pd.DataFrame()

    @property
    def confusion(self) -> pd.DataFrame:
        """Counts: rows are the true class, columns the predicted one."""
        c = self.raw.get("confusion") or {"labels": [], "matrix": []}
        return pd.DataFrame(c["matrix"], index=pd.Index(c["labels"], name="true"),
                            columns=pd.Index(c["labels"], name="predicted"))

    @property
    def calibration(self) -> pd.DataFrame:
        """The reliability bins (lower, upper, count, confidence, accuracy); empty without probabilities."""
        cal = self.raw.get("calibration")
        return pd.DataFrame(cal["bins"]) if cal else pd.DataFrame(columns=["lower", "upper", "count", "confidence",
                                                                            "accuracy"])

    @property
    def by_metadata(self) -> pd.DataFrame:
        """One row per (metadata column, value): n, accuracy, error rate, macro F1."""
        rows = [{"column": column, **row} for column, values in (self.raw.get("by_metadata") or {}).items()
                for row in values]
        return pd.DataFrame(rows, columns=["column", "value", "n", "accuracy", "error_rate", "macro_f1"])

    @property
    def output_checks(self) -> pd.DataFrame:
        """A generation run: one row per output check (applied, passed, pass rate); empty otherwise."""
        checks = (self.raw.get("output_checks") or {}).get("per_check") or []
        return pd.DataFrame(checks, columns=["check", "applied", "passed", "pass_rate"]).set_index("check")

    @property
    def failure_reasons(self) -> pd.DataFrame:
        """A generation run: why outputs fail, most frequent first."""
        return pd.DataFrame((self.raw.get("output_checks") or {}).get("failure_reasons") or [],
                            columns=["reason", "count", "share_of_failures"])

    def __repr__(self) -> str:
        o = self.raw.get("overall") or {}
        return f"Metrics(n={o.get('n')}, accuracy={o.get('accuracy')}, macro_f1={o.get('macro_f1')})"


class Run:
    """A run directory, for notebooks: its parts as DataFrames, read when asked for."""

    def __init__(self, path: str | Path):
        self._run = RunDirectory.open(path)
        self._app = None

    @property
    def path(self) -> Path:
        """The run directory."""
        return self._run.path

    @property
    def name(self) -> str:
        """The run directory's name."""
        return self._run.name

    @property
    def task(self) -> str:
        """classification or generation."""
        return self._run.task

    @property
    def labels(self) -> list[str]:
        """The classes, in the order of the confusion matrix and the probabilities."""
        return self._run.labels

    @property
    def manifest(self) -> dict:
        """manifest.json: what was run, on what, how (docs/run-directory.md)."""
        return self._run.manifest

    @property
    def stages(self) -> pd.DataFrame:
        """Each stage's state, and why one is not done (with the command that resumes it)."""
        manifest = self.manifest
        rows = [{"stage": name, "status": (self._run.state(name, manifest) or {}).get("status"),
                 "seconds": s.get("seconds"), "problem": self._run.explain(name, manifest)}
                for name, s in manifest.get("stages", {}).items()]
        return pd.DataFrame(rows, columns=["stage", "status", "seconds", "problem"]).set_index("stage")

    @property
    def metrics(self) -> Metrics:
        """metrics.json as DataFrames (`Metrics`)."""
        return Metrics(readers.read_metrics(self._run))

    @property
    def predictions(self) -> pd.DataFrame:
        """One row per example (predictions.parquet)."""
        return readers.read_predictions(self._run)

    @property
    def failures(self) -> pd.DataFrame:
        """The failing examples (`correct` false), with their cluster when the run has clusters."""
        return self.examples(failing=True)

    @property
    def clusters(self) -> pd.DataFrame:
        """One row per error cluster, largest first (empty when the cluster stage has not run)."""
        found = readers.read_clusters(self._run, optional=True)
        return found if found is not None else pd.DataFrame(columns=["cluster_id", "size", "name"])

    def examples(self, cluster: int | None = None, *, failing: bool | None = None,
                 limit: int | None = None) -> pd.DataFrame:
        """Examples with their cluster (`cluster_id`, -1 for none): those of `cluster` when given, only failing
        (True) or correct (False) ones when `failing` says so; `limit` rows at most."""
        frame = self.predictions
        assignments = readers.read_assignments(self._run, optional=True)
        if assignments is not None:
            frame = frame.merge(assignments[["example_id", "cluster_id"]], on="example_id", how="left")
            frame["cluster_id"] = frame["cluster_id"].fillna(-1).astype("int64")
        elif cluster is not None:
            raise RunError(f"{self.path}: no clusters yet ({self._run.explain('cluster')}).")
        if cluster is not None:
            frame = frame[frame["cluster_id"] == int(cluster)]
        if failing is not None:
            frame = frame[~frame["correct"] if failing else frame["correct"]]
        frame = frame.reset_index(drop=True)
        return frame.head(limit) if limit is not None else frame

    @property
    def slices(self) -> pd.DataFrame:
        """The error slices (slices.parquet), best first; empty when the slices stage has not run."""
        found = readers.read_slices(self._run, optional=True)
        return found[0] if found is not None else pd.DataFrame(columns=["slice_id", "description"])

    @property
    def checks(self) -> pd.DataFrame:
        """Per example data checks (checks.parquet: label issues, duplicates, leakage); empty without them."""
        found = readers.read_checks(self._run, optional=True)
        return found if found is not None else pd.DataFrame(columns=["example_id", "label_issue_score",
                                                                     "label_issue"])

    @property
    def findings(self) -> list[dict]:
        """What the data checks found, in words (checks.json `findings`)."""
        doc = readers.read_checks_report(self._run, optional=True)
        return list((doc or {}).get("findings") or [])

    def compare(self, *candidates: "Run | str | Path", labels_db: str | Path | None = None,
                params: CompareParams = CompareParams()) -> "Comparison":
        """This run as the baseline against `candidates` (runs of the same eval set)."""
        from erroranalysis import stages

        paths = [c.path if isinstance(c, Run) else Path(c) for c in candidates]
        return Comparison(stages.compare_runs(self.path, paths, labels_db=labels_db, params=params))

    def report(self, out: str | Path, *, labels_db: str | Path | None = None) -> Path:
        """Write the run as one self-contained HTML file (`erroranalysis report`); returns its path."""
        from erroranalysis import stages

        return stages.write_run_report(self.path, out, labels_db=labels_db)

    def show(self, port: int | None = None, *, timeout: float = 120.0) -> str:
        """Open the app on this run (`erroranalysis ui RUN`, in a process of its own) and return its URL; the app
        stops with `stop()` or when Python exits."""
        from erroranalysis.api import app

        self.stop()
        self._app = app.start(self.path, port=port, timeout=timeout)
        return self._app.url

    def stop(self) -> None:
        """Stop the app `show` started, if any."""
        if self._app is not None:
            self._app.stop()
            self._app = None

    def _repr_html_(self) -> str:
        """The notebook's HTML summary: headline metrics, per-class table, confusion matrix, top clusters."""
        return summary_html.run_summary(self.name, self.task, self.metrics.raw, self.clusters, self.stages)

    def __repr__(self) -> str:
        return f"erroranalysis.Run({str(self.path)!r}, task={self.task!r})"


class Comparison:
    """A baseline compared with candidates (`Run.compare`): the document, and its parts as DataFrames."""

    def __init__(self, report: Report):
        self._report = report

    @property
    def doc(self) -> dict:
        """The compare document (docs/compare.md)."""
        return self._report.doc

    @property
    def examples(self) -> pd.DataFrame:
        """One row per (candidate, example): fixed, broken, still failing or still correct."""
        return self._report.examples

    @property
    def overall(self) -> pd.DataFrame:
        """Per candidate and overall metric: baseline, candidate, delta, significance and the paired interval."""
        rows = [{"candidate": c["candidate"], "metric": name, **{k: m[k] for k in ("base", "candidate", "delta",
                                                                                    "significant")},
                 "ci_low": (m["ci"] or (None, None))[0], "ci_high": (m["ci"] or (None, None))[1]}
                for c in self.doc["comparisons"] for name, m in c["overall"].items()]
        return pd.DataFrame(rows)

    @property
    def per_class(self) -> pd.DataFrame:
        """Per candidate and class: support and F1 before, after, its change and whether it is significant."""
        rows = [{"candidate": c["candidate"], "label": r["label"], "support": r["support"],
                 **{f"f1_{k}": r["f1"][k] for k in ("base", "candidate", "delta", "significant")}}
                for c in self.doc["comparisons"] for r in c["per_class"]]
        return pd.DataFrame(rows)

    def report(self, out: str | Path) -> Path:
        """Write the comparison as one self-contained HTML file (`compare --html`)."""
        from erroranalysis import stages

        return stages.write_compare_html(self._report, out)

    def write(self, folder: str | Path) -> list[Path]:
        """compare.json, compare.md and compare_examples.parquet in `folder` (`compare --out`)."""
        from erroranalysis import stages

        return stages.write_report(self._report, folder)

    def _repr_html_(self) -> str:
        return summary_html.compare_summary(self.doc)
