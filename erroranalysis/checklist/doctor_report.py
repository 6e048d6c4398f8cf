"""The doctor's report: sections of findings in checklist order, rendered as Markdown (doctor.md) and data.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from erroranalysis.findings import SEVERITIES, Finding

STATUSES = ("problem", "warning", "ok", "skipped")
STATUS_TEXT = {"problem": "PROBLEM", "warning": "WARNING", "ok": "OK", "skipped": "skipped"}


@dataclass
class Section:
    key: str
    title: str
    status: str          # one of STATUSES
    summary: str         # one line for the summary table
    findings: list[Finding] = field(default_factory=list)
    body: str = ""       # Markdown details

    def to_dict(self) -> dict:
        out = asdict(self)
        out["findings"] = [f.to_dict() for f in self.findings]
        return out


@dataclass
class DoctorResult:
    run: Path
    report: Path
    sections: list[Section]
    next_steps: list[str]

    def to_dict(self) -> dict:
        return {"run": str(self.run), "report": str(self.report), "next_steps": self.next_steps,
                "sections": [s.to_dict() for s in self.sections]}


def render_markdown(result: DoctorResult, *, model: Path, data: Path) -> str:
    from erroranalysis import __version__

    lines = [f"# Doctor report: {model.name} on {data.name}", "",
             f"Run directory `{result.run}`, written {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')} by erroranalysis {__version__}.", "",
             "## Summary", "",
             _table(["#", "check", "result", "finding"],
                    [(str(i), s.title, STATUS_TEXT[s.status], s.summary) for i, s in enumerate(result.sections, 1)]),
             "", "## What to look at next", ""]
    lines += [f"{i}. {step}" for i, step in enumerate(result.next_steps, 1)]
    for i, s in enumerate(result.sections, 1):
        lines += ["", f"## {i}. {s.title} ({STATUS_TEXT[s.status]})", "", s.summary[:1].upper() + s.summary[1:] + ".", ""]
        if s.body:
            lines += [s.body, ""]
        for f in sorted(s.findings, key=lambda f: SEVERITIES.index(f.severity)):
            lines.append(f"- **{f.severity.upper()}** {f.message}. *What to do:* {f.advice}")
    return "\n".join(lines).rstrip() + "\n"


def _status(findings: list[Finding], info_is: str = "ok") -> str:
    severities = {f.severity for f in findings}
    if "error" in severities:
        return "problem"
    if "warning" in severities:
        return "warning"
    return info_is


def _findings_summary(findings: list[Finding], healthy: str) -> str:
    serious = [f for f in findings if f.severity != "info"] or findings
    if not serious:
        return healthy
    first = sorted(serious, key=lambda f: SEVERITIES.index(f.severity))[0].message
    return first + (f" (+{len(serious) - 1} more)" if len(serious) > 1 else "")


def _table(header: list[str], rows: list[tuple]) -> str:
    def cell(value) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _sentence(text: str) -> str:
    text = text.strip()
    return (text[:1].upper() + text[1:]).rstrip(".") + "."


def _snippet(text: str, limit: int = 100) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _finite(value) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return -math.inf
    return value if math.isfinite(value) else -math.inf


def _num(value) -> str:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return "-"
    return f"{value:.4g}" if math.isfinite(value) else "-"
