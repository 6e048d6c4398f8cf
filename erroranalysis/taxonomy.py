"""The labeled error taxonomy of a run: one table that joins predictions, clusters and labels, and the exports
the app and `erroranalysis export` share (JSON with a versioned schema, CSV, Markdown).

    from erroranalysis.runs import Run
    from erroranalysis.labels import LabelStore
    from erroranalysis import taxonomy

    run = Run.open("runs/sample")
    store = LabelStore("runs/labels.sqlite")
    doc = taxonomy.build_taxonomy(run, store)          # a dict that validates against taxonomy.JSON_SCHEMA
    Path("taxonomy.json").write_text(taxonomy.to_json(doc))
    taxonomy.export("runs/sample", "csv", "labels.csv")  # what the CLI does

The JSON format is documented in docs/taxonomy.md.
"""

from __future__ import annotations

import datetime as _dt
import io
import json
import math
from pathlib import Path
from typing import Any

from erroranalysis import __version__
from erroranalysis.errors import DataError, RunError, UserError, check_param
from erroranalysis.labels import FLAGS, FLAG_TITLES, SEVERITIES, LabelStore, default_db_path
from erroranalysis.runs import ASSIGNMENTS, CLUSTERS, Run, atomic_write

FORMAT = "erroranalysis.taxonomy"
SCHEMA_VERSION = 1
EXPORT_FORMATS = ("json", "csv", "markdown")
EXTENSIONS = {"json": ".json", "csv": ".csv", "markdown": ".md"}
MIME = {"json": "application/json", "csv": "text/csv", "markdown": "text/markdown"}

# CSV cells that a spreadsheet would read as a formula start with one of these (OWASP "CSV injection").
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")

CLUSTER_COLUMNS = ("cluster_id", "size", "name")
ASSIGNMENT_COLUMNS = ("example_id", "cluster_id")
CSV_COLUMNS = ["example_id", "error_type", "severity", "source", "status", "label", "pred", "correct", "confidence",
               "loss", "cluster_id", "cluster_name", "label_wrong", "not_error", "note", "updated", "updated_by",
               "text"]

# -- reading the clustering artifacts -----------------------------------------------------------------------------


def read_clusters(run: Run):
    """clusters.parquet as a DataFrame sorted by size (largest first), list columns as lists; None when the run
    was not clustered. RunError when the file is damaged or lacks a column."""
    if not run.has(CLUSTERS):
        return None
    df = run.read_parquet(CLUSTERS, "cluster")
    _require_columns(run.file(CLUSTERS), df, CLUSTER_COLUMNS, "cluster")
    df = df.copy()
    for col in ("keywords", "top_confusions", "exemplar_ids"):
        if col not in df.columns:
            df[col] = [[] for _ in range(len(df))]
        df[col] = [_as_list(v) for v in df[col]]
    df["cluster_id"] = df["cluster_id"].astype("int64")
    df["size"] = df["size"].astype("int64")
    df["name"] = df["name"].fillna("").astype(str)
    return df.sort_values(["size", "cluster_id"], ascending=[False, True]).reset_index(drop=True)


def read_cluster_assignments(run: Run):
    """assignments.parquet (example_id, cluster_id, membership, x, y, ...) or None when absent."""
    if not run.has(ASSIGNMENTS):
        return None
    df = run.read_parquet(ASSIGNMENTS, "cluster")
    _require_columns(run.file(ASSIGNMENTS), df, ASSIGNMENT_COLUMNS, "cluster")
    df = df.copy()
    df["example_id"] = df["example_id"].astype(str)
    df["cluster_id"] = df["cluster_id"].astype("int64")
    return df


def _require_columns(file: Path, df, columns, stage: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise RunError(f"{file}: missing column {missing[0]!r}; re-run the {stage!r} stage.")


def _as_list(value) -> list:
    if value is None:
        return []
    if isinstance(value, float) and math.isnan(value):
        return []
    if isinstance(value, str):
        return [value]
    try:
        return [str(v) if not isinstance(v, (int, float)) else v for v in list(value)]
    except TypeError:
        return [value]


# -- the joined example table ---------------------------------------------------------------------------------------


def base_table(run: Run):
    """One row per example, in eval-set order: predictions.parquet plus cluster_id (-1 when unclustered or the run
    has no clusters), cluster_name, membership, x and y (NaN without a layout)."""
    import numpy as np
    import pandas as pd

    df = run.predictions().copy()
    _require_columns(run.file("predictions.parquet"), df, ("example_id", "label", "pred", "correct"), "infer")
    df["example_id"] = df["example_id"].astype(str)
    for col in ("confidence", "loss"):
        if col not in df.columns:
            df[col] = np.nan
    if "text" not in df.columns:
        df["text"] = ""
    assign = read_cluster_assignments(run)
    if assign is None:
        df["cluster_id"] = np.int64(-1)
        df["cluster_name"] = ""
        df["membership"] = np.nan
        df["x"] = np.nan
        df["y"] = np.nan
        return df
    assign = assign.drop_duplicates("example_id")
    # One hash lookup, then array takes: much faster than a merge on 100k string keys.
    pos = pd.Index(assign["example_id"]).get_indexer(df["example_id"])
    found = pos >= 0
    take = np.where(found, pos, 0)
    cluster = assign["cluster_id"].to_numpy()[take] if len(assign) else np.zeros(len(df), dtype=np.int64)
    df["cluster_id"] = np.where(found, cluster, -1).astype(np.int64)
    for col in ("membership", "x", "y"):
        if col in assign.columns and len(assign):
            df[col] = np.where(found, assign[col].to_numpy(dtype=float)[take], np.nan)
        else:
            df[col] = np.nan
    clusters = read_clusters(run)
    names = dict(zip(clusters["cluster_id"], clusters["name"])) if clusters is not None else {}
    df["cluster_name"] = pd.Series(df["cluster_id"].map(names), index=df.index).fillna("").astype(str)
    return df


def label_tables(store: LabelStore | None, key: str):
    """(assignments, flags, notes) DataFrames of one run from the store (empty ones without a store)."""
    import pandas as pd

    if store is None:
        return (pd.DataFrame(columns=["run", "example_id", "error_type_id", "error_type", "severity", "source",
                                      "status", "cluster_id", "updated", "updated_by"]),
                pd.DataFrame(columns=["run", "example_id", "flag", "created", "created_by"]),
                pd.DataFrame(columns=["run", "example_id", "text", "updated", "updated_by"]))
    return store.assignments(key), store.flags(key), store.notes(key)


def attach_labels(base, assignments, flags, notes):
    """base_table plus the labels: error_type_id (-1 = none), error_type, severity, source, status,
    labeled_cluster_id (the cluster when it was labeled), label_wrong, not_error, note, updated, updated_by."""
    import numpy as np
    import pandas as pd

    df = base.copy()
    idx = df["example_id"]
    if len(assignments):
        a = assignments.drop_duplicates("example_id")
        pos = pd.Index(a["example_id"]).get_indexer(idx)
        found = pos >= 0
        take = np.where(found, pos, 0)
        df["error_type_id"] = np.where(found, a["error_type_id"].to_numpy()[take], -1).astype("int64")
        for col in ("error_type", "severity", "source", "status", "updated", "updated_by"):
            values = a[col].astype(object).to_numpy()[take]
            df[col] = np.where(found, values, "").astype(object)
        cl = a["cluster_id"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)[take]
        df["labeled_cluster_id"] = pd.array(np.where(found, cl, np.nan), dtype="Float64").astype("Int64")
    else:
        df["error_type_id"] = np.int64(-1)
        for col in ("error_type", "severity", "source", "status", "updated", "updated_by"):
            df[col] = ""
        df["labeled_cluster_id"] = pd.array([pd.NA] * len(df), dtype="Int64")
    for flag in FLAGS:
        ids = set(flags.loc[flags["flag"] == flag, "example_id"]) if len(flags) else set()
        df[flag] = idx.isin(ids)
    if len(notes):
        df["note"] = idx.map(notes.set_index("example_id")["text"]).fillna("").astype(str)
    else:
        df["note"] = ""
    return df


def example_table(run: Run, store: LabelStore | None = None):
    """base_table(run) with the run's labels from `store` attached (see attach_labels)."""
    key = store.run_key(run.path) if store is not None else run.name
    return attach_labels(base_table(run), *label_tables(store, key))


def labeled_rows(table):
    """The rows an export lists: examples with an error type, a flag or a note."""
    return table[(table["error_type_id"] >= 0) | table["label_wrong"] | table["not_error"] | (table["note"] != "")]


# -- the taxonomy document ------------------------------------------------------------------------------------------


def build_taxonomy(run: Run, store: LabelStore | None = None, *, exemplars: int = 3, include_text: bool = True,
                   table=None, error_types=None) -> dict:
    """The labeled taxonomy of `run` as a JSON-ready dict (validates against JSON_SCHEMA).

    `table` (an example_table) and `error_types` (store.error_types()) may be passed when already at hand.
    """
    check_param("exemplars", exemplars, isinstance(exemplars, int) and exemplars >= 0, "an integer >= 0")
    if table is None:
        table = example_table(run, store)
    if error_types is None:
        error_types = store.error_types() if store is not None else []
    manifest = run.manifest
    failures = ~table["correct"].astype(bool)
    n_fail = int(failures.sum())
    accepted = table["status"] == "accepted"
    labeled_failures = int((failures & accepted & (table["error_type_id"] >= 0)).sum())

    types = []
    for et in error_types:
        rows = table[table["error_type_id"] == et.id]
        acc = rows[rows["status"] == "accepted"]
        acc_fail = acc[~acc["correct"].astype(bool)]
        by_label = acc["label"].value_counts()
        by_pred = acc["pred"].value_counts()
        conf = acc_fail.groupby(["label", "pred"]).size().sort_values(ascending=False)
        clusters = acc[acc["cluster_id"] >= 0].groupby(["cluster_id", "cluster_name"]).size() \
            .sort_values(ascending=False)
        types.append({
            "id": int(et.id),
            "name": et.name,
            "definition": et.definition,
            "severity": et.severity,
            "count": int(len(acc)),
            "failures": int(len(acc_fail)),
            "suggested": int((rows["status"] == "pending").sum()),
            "share_of_failures": _round(len(acc_fail) / n_fail) if n_fail else 0.0,
            "per_class": {
                "by_label": {str(k): int(v) for k, v in by_label.items()},
                "by_pred": {str(k): int(v) for k, v in by_pred.items()},
                "confusions": [{"label": str(lab), "pred": str(pred), "count": int(c)}
                               for (lab, pred), c in conf.items()],
            },
            "clusters": [{"cluster_id": int(cid), "name": str(name), "count": int(c)}
                         for (cid, name), c in clusters.items()],
            "exemplars": [_example(r, include_text=True) for _, r in _exemplars(acc, exemplars).iterrows()],
            "created": et.created,
            "created_by": et.created_by,
        })
    types.sort(key=lambda t: (-t["count"], t["name"].lower()))

    listed = labeled_rows(table)
    assignments = []
    cols = ["example_id", "label", "pred", "correct", "confidence", "loss", "error_type", "error_type_id", "source",
            "status", "cluster_id", "note", "updated", "updated_by", *FLAGS] + (["text"] if include_text else [])
    for r in listed[cols].to_dict("records"):
        item = _example(r, include_text=include_text)
        item.update({
            "error_type": r["error_type"] or None,
            "error_type_id": int(r["error_type_id"]) if r["error_type_id"] >= 0 else None,
            "source": r["source"] or None,
            "status": r["status"] or None,
            "cluster_id": int(r["cluster_id"]),
            "flags": [f for f in FLAGS if bool(r[f])],
            "note": r["note"] or None,
            "updated": r["updated"] or None,
            "updated_by": r["updated_by"] or None,
        })
        assignments.append(item)

    model = manifest.get("model") or {}
    data = manifest.get("data") or {}
    return {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "tool": {"name": "erroranalysis", "version": __version__},
        "run": {
            "name": run.name,
            "key": store.run_key(run.path) if store is not None else run.name,
            "task": manifest.get("task", "classification"),
            "labels": [str(x) for x in manifest.get("labels", [])],
            "model": model.get("path"),
            "data": data.get("path"),
            "n_examples": int(len(table)),
            "n_failures": n_fail,
            "accuracy": _round(1 - n_fail / len(table)) if len(table) else None,
        },
        "summary": {
            "n_error_types": len(types),
            "n_assigned": int((accepted & (table["error_type_id"] >= 0)).sum()),
            "n_labeled_failures": labeled_failures,
            "n_unlabeled_failures": n_fail - labeled_failures,
            "share_of_failures_labeled": _round(labeled_failures / n_fail) if n_fail else 0.0,
            "n_suggested": int((table["status"] == "pending").sum()),
            "flags": {f: int(table[f].sum()) for f in FLAGS},
        },
        "error_types": types,
        "assignments": assignments,
    }


def _exemplars(rows, k: int):
    if k == 0 or rows.empty:
        return rows.head(0)
    order = rows.assign(_m=rows["membership"].fillna(-1.0), _c=rows["confidence"].fillna(-1.0))
    return order.sort_values(["_m", "_c", "example_id"], ascending=[False, False, True]).head(k)


def _example(r, *, include_text: bool) -> dict:
    item = {
        "example_id": str(r["example_id"]),
        "label": str(r["label"]),
        "pred": str(r["pred"]),
        "correct": bool(r["correct"]),
        "confidence": _num(r.get("confidence")),
        "loss": _num(r.get("loss")),
    }
    if include_text:
        item["text"] = "" if r.get("text") is None else str(r["text"])
    return item


def _num(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) or math.isinf(value) else _round(value)


def _round(value: float) -> float:
    return round(float(value), 6)


# -- JSON schema ------------------------------------------------------------------------------------------------------

_NUM_OR_NULL = {"type": ["number", "null"]}
_STR_OR_NULL = {"type": ["string", "null"]}
_EXAMPLE = {
    "type": "object",
    "required": ["example_id", "label", "pred", "correct", "confidence", "loss"],
    "properties": {
        "example_id": {"type": "string"},
        "label": {"type": "string"},
        "pred": {"type": "string"},
        "correct": {"type": "boolean"},
        "confidence": _NUM_OR_NULL,
        "loss": _NUM_OR_NULL,
        "text": {"type": "string"},
    },
}
_COUNTS = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}

JSON_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "erroranalysis taxonomy export",
    "description": "Error types of one run with counts, per-class breakdown, exemplars and per-example assignments.",
    "type": "object",
    "required": ["format", "schema_version", "generated", "tool", "run", "summary", "error_types", "assignments"],
    "properties": {
        "format": {"const": FORMAT},
        "schema_version": {"const": SCHEMA_VERSION},
        "generated": {"type": "string"},
        "tool": {"type": "object", "required": ["name", "version"],
                 "properties": {"name": {"type": "string"}, "version": {"type": "string"}}},
        "run": {
            "type": "object",
            "required": ["name", "key", "task", "labels", "n_examples", "n_failures"],
            "properties": {
                "name": {"type": "string"},
                "key": {"type": "string"},
                "task": {"type": "string"},
                "labels": {"type": "array", "items": {"type": "string"}},
                "model": _STR_OR_NULL,
                "data": _STR_OR_NULL,
                "n_examples": {"type": "integer", "minimum": 0},
                "n_failures": {"type": "integer", "minimum": 0},
                "accuracy": _NUM_OR_NULL,
            },
        },
        "summary": {
            "type": "object",
            "required": ["n_error_types", "n_assigned", "n_labeled_failures", "n_unlabeled_failures",
                         "share_of_failures_labeled", "n_suggested", "flags"],
            "properties": {
                "n_error_types": {"type": "integer", "minimum": 0},
                "n_assigned": {"type": "integer", "minimum": 0},
                "n_labeled_failures": {"type": "integer", "minimum": 0},
                "n_unlabeled_failures": {"type": "integer", "minimum": 0},
                "share_of_failures_labeled": {"type": "number", "minimum": 0, "maximum": 1},
                "n_suggested": {"type": "integer", "minimum": 0},
                "flags": {"type": "object", "required": list(FLAGS), "properties": {
                    f: {"type": "integer", "minimum": 0} for f in FLAGS}},
            },
        },
        "error_types": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "name", "definition", "severity", "count", "failures", "suggested",
                             "share_of_failures", "per_class", "clusters", "exemplars"],
                "properties": {
                    "id": {"type": "integer"},
                    "name": {"type": "string", "minLength": 1},
                    "definition": {"type": "string"},
                    "severity": {"enum": list(SEVERITIES)},
                    "count": {"type": "integer", "minimum": 0},
                    "failures": {"type": "integer", "minimum": 0},
                    "suggested": {"type": "integer", "minimum": 0},
                    "share_of_failures": {"type": "number", "minimum": 0, "maximum": 1},
                    "per_class": {
                        "type": "object",
                        "required": ["by_label", "by_pred", "confusions"],
                        "properties": {
                            "by_label": _COUNTS,
                            "by_pred": _COUNTS,
                            "confusions": {"type": "array", "items": {
                                "type": "object", "required": ["label", "pred", "count"],
                                "properties": {"label": {"type": "string"}, "pred": {"type": "string"},
                                               "count": {"type": "integer", "minimum": 0}}}},
                        },
                    },
                    "clusters": {"type": "array", "items": {
                        "type": "object", "required": ["cluster_id", "name", "count"],
                        "properties": {"cluster_id": {"type": "integer"}, "name": {"type": "string"},
                                       "count": {"type": "integer", "minimum": 0}}}},
                    "exemplars": {"type": "array", "items": _EXAMPLE},
                    "created": {"type": "string"},
                    "created_by": {"type": "string"},
                },
            },
        },
        "assignments": {
            "type": "array",
            "items": {
                "allOf": [_EXAMPLE, {
                    "type": "object",
                    "required": ["error_type", "error_type_id", "source", "status", "cluster_id", "flags", "note"],
                    "properties": {
                        "error_type": _STR_OR_NULL,
                        "error_type_id": {"type": ["integer", "null"]},
                        "source": {"enum": ["human", "suggested", None]},
                        "status": {"enum": ["accepted", "pending", "rejected", None]},
                        "cluster_id": {"type": "integer"},
                        "flags": {"type": "array", "items": {"enum": list(FLAGS)}},
                        "note": _STR_OR_NULL,
                        "updated": _STR_OR_NULL,
                        "updated_by": _STR_OR_NULL,
                    },
                }],
            },
        },
    },
}


def validate(doc: dict, source: str = "taxonomy") -> None:
    """Raise DataError naming the first place `doc` breaks JSON_SCHEMA."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(JSON_SCHEMA)
    error = next(iter(sorted(validator.iter_errors(doc), key=lambda e: list(e.path))), None)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise DataError(f"{source}: {where}: {error.message.splitlines()[0]}; export it again with this version.")


def load(path: str | Path) -> dict:
    """Read and validate a taxonomy JSON export."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: no such file; export one with 'erroranalysis export RUN --format json'.") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}, line {exc.lineno}: not valid JSON ({exc.msg}).") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise DataError(f"{path}: not an erroranalysis taxonomy (no \"format\": \"{FORMAT}\").")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise DataError(f"{path}: schema_version {doc.get('schema_version')!r} is not supported "
                        f"(expected {SCHEMA_VERSION}).")
    validate(doc, str(path))
    return doc


# -- renderers --------------------------------------------------------------------------------------------------------


def to_json(doc: dict) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def neutralize(value: Any) -> Any:
    """A CSV cell a spreadsheet will not run as a formula: text starting with = + - @ (or tab / CR) gets a leading
    apostrophe. Numbers are left alone (a number we wrote is not a formula)."""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


def csv_frame(table):
    """The CSV export's rows (examples with an error type, flag or note), text columns neutralized."""
    rows = labeled_rows(table).copy()
    for col in CSV_COLUMNS:
        if col not in rows.columns:
            rows[col] = ""
    rows = rows[CSV_COLUMNS]
    for col in rows.columns:
        if rows[col].dtype == object or str(rows[col].dtype).startswith(("string", "str")):
            rows[col] = rows[col].map(neutralize)
    return rows


def to_csv(table) -> str:
    buf = io.StringIO()
    csv_frame(table).to_csv(buf, index=False)
    return buf.getvalue()


def md_escape(text: Any, limit: int | None = None) -> str:
    """Text safe inside a Markdown table cell or paragraph: one line, markup characters escaped, HTML inert."""
    s = " ".join(str("" if text is None else text).split())
    if limit is not None and len(s) > limit:
        s = s[: limit - 1].rstrip() + "…"
    s = s.replace("\\", "\\\\")
    for ch in "`*_[]()#|!~":
        s = s.replace(ch, "\\" + ch)
    return s.replace("<", "&lt;").replace(">", "&gt;")


def to_markdown(doc: dict, *, exemplars: int = 3) -> str:
    """A report of the taxonomy that reads well in a pull request."""
    run, summary = doc["run"], doc["summary"]
    lines = [f"# Error taxonomy: {md_escape(run['name'])}", ""]
    facts = []
    if run.get("model"):
        facts.append(f"model `{md_code(run['model'])}`")
    if run.get("data"):
        facts.append(f"data `{md_code(run['data'])}`")
    facts.append(f"{run['n_examples']:,} examples")
    if run.get("accuracy") is not None:
        facts.append(f"accuracy {run['accuracy']:.1%}")
    facts.append(f"{run['n_failures']:,} failures")
    lines += [" · ".join(facts), ""]
    lines.append(f"**{summary['n_labeled_failures']:,} of {run['n_failures']:,} failures labeled "
                 f"({summary['share_of_failures_labeled']:.0%})** into {summary['n_error_types']} error "
                 f"type{'' if summary['n_error_types'] == 1 else 's'}"
                 + (f"; {summary['n_suggested']:,} suggestions await review" if summary["n_suggested"] else "")
                 + ".")
    flagged = [f"{n:,} marked *{FLAG_TITLES[f]}*" for f, n in summary["flags"].items() if n]
    if flagged:
        lines.append(f"Flags: {', '.join(flagged)}.")
    lines.append("")
    types = doc["error_types"]
    if not types:
        lines += ["_No error types yet: label failures in the app (`erroranalysis ui`)._", ""]
    else:
        lines += ["| Error type | Severity | Examples | Share of failures | Top confusion |",
                  "| --- | --- | ---: | ---: | --- |"]
        for t in types:
            top = t["per_class"]["confusions"][:1]
            conf = f"{md_escape(top[0]['label'])} → {md_escape(top[0]['pred'])} ({top[0]['count']})" if top else ""
            lines.append(f"| {md_escape(t['name'], 60)} | {t['severity']} | {t['count']:,} | "
                         f"{t['share_of_failures']:.1%} | {conf} |")
        lines.append("")
        for t in types:
            lines.append(f"## {md_escape(t['name'])}")
            lines.append("")
            lines.append(f"*{t['severity']} severity · {t['count']:,} examples · "
                         f"{t['share_of_failures']:.1%} of failures*")
            lines.append("")
            if t["definition"]:
                lines += [md_escape(t["definition"], 1000), ""]
            confs = t["per_class"]["confusions"][:3]
            if confs:
                lines.append("Confusions: " + ", ".join(
                    f"{md_escape(c['label'])} → {md_escape(c['pred'])} ({c['count']})" for c in confs) + ".")
                lines.append("")
            for ex in t["exemplars"][:exemplars]:
                conf = f", confidence {ex['confidence']:.2f}" if ex.get("confidence") is not None else ""
                lines.append(f"> {md_escape(ex.get('text', ''), 240)}  ")
                lines.append(f"> — `{md_code(ex['example_id'])}`: {md_escape(ex['label'])} → "
                             f"{md_escape(ex['pred'])}{conf}")
                lines.append("")
    lines.append(f"<sub>erroranalysis {md_escape(doc['tool']['version'])} · taxonomy schema "
                 f"v{doc['schema_version']} · {md_escape(doc['generated'])}</sub>")
    return "\n".join(lines) + "\n"


def md_code(text: Any) -> str:
    """Text for an inline `code` span in Markdown: one line, no backticks."""
    return " ".join(str(text).split()).replace("`", "'")


def render(fmt: str, run: Run, store: LabelStore | None, *, table=None, error_types=None) -> str:
    """The export in `fmt` (json, csv or markdown) as text."""
    check_param("format", fmt, fmt in EXPORT_FORMATS, f"one of {', '.join(EXPORT_FORMATS)}")
    if table is None:
        table = example_table(run, store)
    if fmt == "csv":
        return to_csv(table)
    doc = build_taxonomy(run, store, table=table, error_types=error_types)
    if fmt == "json":
        validate(doc)
        return to_json(doc)
    return to_markdown(doc)


def open_store(run_path: str | Path, labels_db: str | Path | None = None) -> LabelStore | None:
    """The labels store for a run: `labels_db` when given (it must exist), else `<run's parent>/labels.sqlite` when
    it exists, else None (a run nobody labeled yet exports with no error types)."""
    if labels_db is not None:
        path = Path(labels_db)
        if not path.is_file():
            raise UserError(f"{path}: no labels database here; check --labels-db.")
        return LabelStore(path, create=False)
    path = default_db_path(Path(run_path).resolve().parent)
    return LabelStore(path, create=False) if path.is_file() else None


def export(run_path: str | Path, fmt: str, out: str | Path, *, labels_db: str | Path | None = None) -> Path:
    """Write the run's taxonomy export to `out` atomically; return the path."""
    check_param("format", fmt, fmt in EXPORT_FORMATS, f"one of {', '.join(EXPORT_FORMATS)}")
    run = Run.open(run_path)
    store = open_store(run.path, labels_db)
    text = render(fmt, run, store)
    out = Path(out)
    if out.is_dir():
        raise UserError(f"{out}: is a directory; pass a file name such as {out / ('taxonomy' + EXTENSIONS[fmt])}.")
    atomic_write(out, lambda p: p.write_text(text, encoding="utf-8"))
    return out
