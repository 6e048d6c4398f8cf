"""`erroranalysis training LOG_OR_CHECKPOINT [--json | --json-out FILE]`: what went wrong in the training run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from erroranalysis.cli import common
from erroranalysis.cli.common import console, handle_errors

STYLES = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def register(app: typer.Typer) -> None:
    app.command("training", help="Check a training log: loss trend, NaN/inf, grad-norm spikes, learning-rate "
                                 "schedule, overfitting onset and train/val gap.")(training)


@handle_errors
def training(
    log: Annotated[Path, typer.Argument(metavar="LOG_OR_CHECKPOINT", help="trainer_state.json, a checkpoint or "
                                        "output folder, TensorBoard events, or a CSV/JSONL log with step and loss.")],
    as_json: common.Json = False,
    json_out: common.JsonOut = None,
) -> None:
    from erroranalysis.checklist.training import training_report
    from erroranalysis.checklist.training_log import load_training_log

    common.check_json_out(json_out)
    report = training_report(load_training_log(log))
    common.write_json_out(json_out, report)
    if as_json:
        common.print_json(report)
        return
    _print(report)
    if json_out is not None:
        typer.echo(f"wrote {json_out}")


def _print(report: dict) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = console()
    out.print(f"[bold]Training log[/bold] {escape(str(report['source']))} ({report['format']})")
    signals = Table("signal", "points", "steps", "first", "last", "min (step)", box=None)
    for name, s in report["signals"].items():
        low = "-" if s["min"] is None else f"{s['min']:.4g} ({s['min_step']})"
        signals.add_row(escape(name), str(s["points"]), f"{s['first_step']}-{s['last_step']}", _num(s["first"]),
                        _num(s["last"]), low)
    out.print(signals)
    findings = report["findings"]
    if not findings:
        out.print("[green]No problems found[/green] in the logged signals.")
        return
    for f in findings:
        out.print(f"\n[{STYLES[f['severity']]}]{f['severity'].upper()}[/] {escape(f['message'])}.", soft_wrap=True)
        out.print(f"  what to do: {escape(f['advice'])}", soft_wrap=True)


def _num(value) -> str:
    return "-" if value is None else f"{value:.4g}"
