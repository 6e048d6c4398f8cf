"""The Finding every check returns: where (steps, so the batches to inspect), what, and what to do."""

from __future__ import annotations

from dataclasses import dataclass

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    check: str
    severity: str  # one of SEVERITIES
    steps: tuple[int, ...]
    message: str
    advice: str

    def to_dict(self) -> dict:
        return {"check": self.check, "severity": self.severity, "steps": list(self.steps),
                "message": self.message, "advice": self.advice}
