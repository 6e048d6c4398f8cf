"""The `erroranalysis` command: a Typer app with one module per command, each loaded when it is used.

A command's options come from the parameter declarations of the library (`erroranalysis.cli.options`), so its
module imports the library; loading only the command that runs keeps `erroranalysis --help` and every command's
start-up free of the others' imports. The root listing needs nothing but the names and one line each, below.
"""

from __future__ import annotations

import os
from typing import Annotated

import click
import typer
from typer.core import TyperGroup

from erroranalysis import __version__
from erroranalysis.cli import common

# name -> one line for `erroranalysis --help`; the command lives in erroranalysis/cli/<name with _>.py
COMMANDS = {
    "run": "Run a checkpoint over an eval set: predictions, metrics, data checks, error slices, failure clusters.",
    "analyze": "Analyze predictions made elsewhere: metrics, data checks, slices and failure clusters.",
    "metrics": "Recompute metrics.json from a run's predictions, without re-running inference.",
    "show": "Print a run's overall metrics, per-class table, confusion matrix and top error clusters.",
    "cluster": "Embed a run's failures, cluster them into error types and name them.",
    "slices": "Find groups of examples (words, metadata, lengths) whose error rate stands out.",
    "data-checks": "Is the label or the data wrong? Label issues, duplicates, leakage, distribution shift.",
    "ui": "Open the app: browse failures, label error types, export the taxonomy.",
    "export": "Export a run's labeled error taxonomy as JSON, CSV or a Markdown report.",
    "training": "Check a training log: loss trend, NaN/inf, grad-norm spikes, LR schedule, overfitting.",
    "overfit": "Can the checkpoint memorize a few examples? If not, the likely causes.",
    "sft-check": "Check SFT training data as the trainer sees it: masks, truncation, EOS, BOS, chat template.",
    "doctor": "The whole debugging checklist, in order, in one report (doctor.md).",
    "compare": "Compare a baseline run with candidates: deltas with intervals, fixed and broken examples.",
    "report": "Write a run as one self-contained HTML file to share (metrics, clusters, slices, checks, taxonomy).",
    "apply-taxonomy": "Suggest a labeled taxonomy's error types for another run's failures.",
    "import-taxonomy": "Create a taxonomy's error types in a workspace's labels database.",
    "labels": "Look after the labels database: where, backup, restore, archive, migrate, check, log.",
    "migrate": "Upgrade runs to the current run-directory format.",
    "watch": "Analyze each checkpoint of a training run as it lands, one run per step.",
    "timeline": "Error types followed across a training run's steps, beside loss and learning rate.",
}
ALIASES = {"checks": "data-checks"}  # old names, kept one release (hidden, with a warning)


class LazyCommands(TyperGroup):
    """Loads a command's module when the command is asked for; lists them from COMMANDS."""

    listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS and name not in ALIASES:
            return None
        if self.listing and name in COMMANDS:  # the root help: one line each, nothing imported
            return click.Command(name, help=COMMANDS[name], short_help=COMMANDS[name])
        return load(name)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False


def load(name: str) -> click.Command:
    """The click command `name` (a command or an old alias), built from its module's `register`."""
    import importlib

    target = ALIASES.get(name, name)
    module = importlib.import_module(f"erroranalysis.cli.{target.replace('-', '_')}")
    holder = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    module.register(holder)
    return typer.main.get_group(holder).commands[name]


app = typer.Typer(
    name="erroranalysis",
    help="Error analysis and failure clustering for ML and LLM models.",
    cls=LazyCommands,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"erroranalysis {__version__}")
        raise typer.Exit()


@app.callback()
@common.handle_errors
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors.")] = False,
    log_level: Annotated[str, typer.Option(
        "--log-level", help="What the library logs to stderr beside the progress lines: debug, info, warning, "
                            "error.")] = "warning",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="The same as --log-level info.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    from erroranalysis.core import progress

    if debug:
        os.environ["ERRORANALYSIS_DEBUG"] = "1"
    progress.configure_logging("info" if verbose and log_level == "warning" else log_level)


def main() -> None:
    import gc
    import signal
    import sys

    from erroranalysis.core import libraries
    from erroranalysis.rundir import run as rundir_run

    libraries.FREEZE = True  # this process ends with its command: what torch and transformers made may be frozen
    rundir_run.COMMAND = ["erroranalysis", *sys.argv[1:]]  # recorded in the manifest of a run this creates
    signal.signal(signal.SIGTERM, common.terminated)  # SIGTERM is handled like Ctrl-C: stages marked interrupted
    try:
        app()  # commands turn interrupts and a closed stdout into exit codes themselves (common.handle_errors)
    finally:
        # Python's exit collects every object left; frozen ones are skipped (the libraries' were frozen at import,
        # this covers what the command made since). Files are closed and atexit handlers run as before; only
        # objects in reference cycles are not finalized, and the writers here close their files themselves.
        gc.freeze()
