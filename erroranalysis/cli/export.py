"""`erroranalysis export RUN --format json|csv|markdown --out FILE`: the labeled taxonomy of a run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from erroranalysis.cli.common import Json, RunDir, console, handle_errors, print_json

FORMATS = ("json", "csv", "markdown")


def register(app: typer.Typer) -> None:
    app.command("export", help="Export a run's labeled error taxonomy as JSON, CSV or a Markdown report.")(export)


@handle_errors
def export(
    run: RunDir,
    format: Annotated[str, typer.Option("--format", "-f", help="json (versioned schema, see docs/taxonomy.md), "
                                        "csv (one row per labeled example) or markdown (a report for a PR).")
                      ] = "json",
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="File to write; default "
                                                "<RUN>/taxonomy.<json|csv|md>.")] = None,
    labels_db: Annotated[Optional[Path], typer.Option("--labels-db", help="Labels database; default the "
                                                      "nearest labels.sqlite above RUN (docs/labels.md).")] = None,
    as_json: Json = False,
) -> None:
    from erroranalysis import stages
    from erroranalysis.core.validation import check_param
    from erroranalysis.labels import taxonomy

    fmt = format.strip().lower()
    if fmt == "md":
        fmt = "markdown"
    check_param("--format", format, fmt in FORMATS, "json, csv or markdown")
    target = out if out is not None else Path(run) / f"taxonomy{taxonomy.EXTENSIONS[fmt]}"
    path = stages.export_taxonomy(run, fmt, target, labels_db=labels_db)
    notes = stages.export_notes(run)  # a stage it reads was interrupted: what the export lacks
    if as_json:
        print_json({"run": str(run), "format": fmt, "path": str(path), "notes": notes})
        return
    out = console()
    out.print(f"wrote {path}", markup=False, soft_wrap=True)
    for note in notes:
        out.print(note, style="yellow", markup=False, soft_wrap=True)
