"""The `erroranalysis` command: a Typer app with one module per command."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from erroranalysis import __version__

app = typer.Typer(
    name="erroranalysis",
    help="Error analysis and failure clustering for ML and LLM models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"erroranalysis {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    if debug:
        os.environ["ERRORANALYSIS_DEBUG"] = "1"


COMMANDS = ["run", "analyze", "metrics", "show", "cluster", "slices", "ui", "export", "checks", "training",
            "overfit", "doctor", "compare", "apply_taxonomy", "import_taxonomy", "labels", "migrate", "watch", "timeline"]


def _register() -> None:
    """Each command lives in its own module under erroranalysis/cli/ and exposes `register(app)`."""
    import importlib

    for name in COMMANDS:
        importlib.import_module(f"erroranalysis.cli.{name}").register(app)


_register()


def main() -> None:
    import gc
    import signal
    import sys

    from erroranalysis import libraries
    from erroranalysis.cli import common
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
