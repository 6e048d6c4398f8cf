"""`erroranalysis migrate RUN [RUN ...]`: upgrade runs made by an older erroranalysis, in place, with backups."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from erroranalysis.cli import common


def register(app: typer.Typer) -> None:
    @app.command("migrate")
    @common.handle_errors
    def migrate_command(
        runs: Annotated[list[Path], typer.Argument(help="Run directories to upgrade.")],
        as_json: common.Json = False,
    ) -> None:
        """Upgrade runs to the current run-directory format (the changed files are kept as *.v1.bak)."""
        from erroranalysis.rundir.migrate import migrate_run

        out = common.console()
        if as_json:
            common.print_json([migrate_run(run) for run in runs])
            return
        for run in runs:
            result = migrate_run(run)
            if result["changed"]:
                out.print(f"{run}: schema_version {result['from']} -> {result['to']} "
                          f"(backups: {', '.join(result['backups'])})", markup=False)
            else:
                out.print(f"{run}: already schema_version {result['to']}", markup=False)
