"""The taxonomy document: its JSON schema and validation, and its renderings (JSON, CSV, Markdown).

The JSON format is documented in docs/taxonomy.md. Version 2 adds each error type's `parent` (the name of its parent
type, or null); readers accept versions 1 and 2 (a version-1 type has no parent).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from erroranalysis.core.errors import DataError
from erroranalysis.labels.bounds import check_nesting, check_parents, parse
from erroranalysis.labels.fields import FLAG_TITLES, FLAGS, MAX_NAME, SEVERITIES, display_name

FORMAT = "erroranalysis.taxonomy"
SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
EXPORT_FORMATS = ("json", "csv", "markdown")
EXTENSIONS = {"json": ".json", "csv": ".csv", "markdown": ".md"}
MIME = {"json": "application/json", "csv": "text/csv", "markdown": "text/markdown"}


# CSV cells that a spreadsheet would read as a formula start with one of these (OWASP "CSV injection").
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
CSV_COLUMNS = ["example_id", "error_type", "severity", "source", "status", "label", "pred", "correct", "confidence",
               "loss", "cluster_id", "cluster_name", "label_wrong", "not_error", "note", "updated", "updated_by",
               "text"]


def labeled_rows(table):
    """The rows an export lists: examples with an error type, a flag or a note."""
    return table[(table["error_type_id"] >= 0) | table["label_wrong"] | table["not_error"] | (table["note"] != "")]


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
_NAME = {"type": "string", "minLength": 1, "maxLength": MAX_NAME,
         "description": f"An error type name: at most {MAX_NAME} characters (erroranalysis.labels.MAX_NAME); names "
                        "are compared ignoring case (Unicode case folding)."}


def json_schema(version: int = SCHEMA_VERSION) -> dict:
    """The JSON Schema (2020-12) of taxonomy documents of `version` (1 or 2)."""
    schema = _schema_v1()
    schema["properties"]["schema_version"] = {"const": version}
    if version >= 2:
        types = schema["properties"]["error_types"]["items"]
        types["required"].append("parent")
        types["properties"]["parent"] = {**_NAME, "type": ["string", "null"],
                                         "description": "The name of the parent error type (one of error_types), "
                                                        "or null for a top-level type."}
    return schema


def _schema_v1() -> dict:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "erroranalysis taxonomy export",
        "description": "Error types of one run with counts, per-class breakdown, exemplars and per-example assignments.",
        "type": "object",
        "required": ["format", "schema_version", "generated", "tool", "run", "summary", "error_types", "assignments"],
        "properties": {
            "format": {"const": FORMAT},
            "schema_version": {"const": 1},
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
                        "name": dict(_NAME),
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
                            "error_type": {**_NAME, "type": ["string", "null"]},
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


JSON_SCHEMA: dict = json_schema(SCHEMA_VERSION)


def check_version(doc: Any, source: str) -> int:
    """The document's schema_version, refused (DataError) when it is not a taxonomy or a version this reads."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise DataError(f"{source}: not an erroranalysis taxonomy (no \"format\": \"{FORMAT}\").")
    version = doc.get("schema_version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise DataError(f"{source}: schema_version {version!r} is not supported (this version reads "
                        f"{' and '.join(map(str, READABLE_VERSIONS))}); export it again with this version.")
    return version


def validate(doc: dict, source: str = "taxonomy") -> None:
    """Raise DataError naming the first place `doc` breaks the schema of its version, a name over MAX_NAME (naming
    the type), a parent that is missing, makes a cycle or lies deeper than MAX_DEPTH, or nesting deeper than
    MAX_NESTING (labels.bounds)."""
    import jsonschema

    check_nesting(doc, source)
    version = check_version(doc, source)
    _check_name_lengths(doc, source)
    validator = jsonschema.Draft202012Validator(json_schema(version))
    error = next(iter(sorted(validator.iter_errors(doc), key=lambda e: list(e.path))), None)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise DataError(f"{source}: {where}: {error.message.splitlines()[0]}; export it again with this version.")
    check_parents(doc, source)


def _check_name_lengths(doc: dict, source: str) -> None:
    types = doc.get("error_types")
    for i, t in enumerate(types if isinstance(types, list) else []):
        for key in ("name", "parent"):
            name = t.get(key) if isinstance(t, dict) else None
            if isinstance(name, str) and len(name) > MAX_NAME:
                shown = name[:40] + "…"
                raise DataError(f"{source}: error_types/{i}/{key}: error type name {shown!r} is {len(name)} "
                                f"characters long; names have at most {MAX_NAME} (erroranalysis.labels.MAX_NAME): "
                                "shorten it and import again.")


def parent_of(error_type: dict) -> str | None:
    """An error type's parent name in a document of either version (version 1 has none)."""
    parent = error_type.get("parent")
    return display_name(parent) if parent else None


def load(path: str | Path) -> dict:
    """Read and validate a taxonomy JSON export (schema version 1 or 2)."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file; export one with 'erroranalysis export RUN --format json'.") from None
    return loads(text, str(path))


def loads(text: str | bytes, source: str) -> dict:
    """Parse and validate a taxonomy JSON export given as text or UTF-8 bytes (an upload); `source` names it in
    the one-line DataError (bad JSON, nesting deeper than labels.bounds allows, or the schema)."""
    doc = parse(text, source)
    validate(doc, source)
    return doc


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
            under = f" · under {md_escape(t['parent'])}" if t.get("parent") else ""
            lines.append(f"*{t['severity']} severity · {t['count']:,} examples · "
                         f"{t['share_of_failures']:.1%} of failures{under}*")
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
