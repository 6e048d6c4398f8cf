"""`erroranalysis report RUN --out report.html`: the run as one self-contained HTML file to share."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from erroranalysis.cli import common


def register(app: typer.Typer) -> None:
    @app.command("report")
    @common.handle_errors
    def report_command(
        run_dir: common.RunDir,
        out: Annotated[Path, typer.Option("--out", "-o", help="The HTML file to write.")] = Path("report.html"),
        labels_db: Annotated[Optional[Path], typer.Option(
            "--labels-db", help="Labels database for the taxonomy section (default: the run's, by the workspace "
                                "rule; see docs/labels.md).")] = None,
        as_json: common.Json = False,
    ) -> None:
        """Write one self-contained HTML file (no network when opened): metrics, per-class table, confusion,
        calibration, clusters with exemplars, slices, data checks and the labeled taxonomy."""
        from erroranalysis import stages

        written = stages.write_run_report(run_dir, out, labels_db=labels_db)
        size = written.stat().st_size
        if as_json:
            common.print_json({"report": str(written), "bytes": size})
            return
        typer.echo(f"wrote {written} ({size / 2**20:.1f} MiB); open it in any browser, or send it")
