"""What every command shares: option aliases, error handling, console output.

Commands import only typer and this module at import time; the library is imported inside the command body,
so `erroranalysis --help` answers at once.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Annotated, Callable

import typer

# Shared option aliases, so every command spells the same thing the same way.
RunDir = Annotated[Path, typer.Argument(help="A run directory made by 'erroranalysis run' or 'analyze'.")]
OutDir = Annotated[Path, typer.Option("--out", "-o", help="Run directory to write.")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace an existing run at --out.")]
Seed = Annotated[int, typer.Option("--seed", help="Seed for every random step.")]


def debug_enabled() -> bool:
    return os.environ.get("ERRORANALYSIS_DEBUG") == "1"


def fail(message: str, code: int = 2) -> None:
    """Print one line to stderr and exit."""
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(code)


def handle_errors(command: Callable) -> Callable:
    """Map library exceptions to one-line messages and exit codes (2 user error, 1 internal error)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from erroranalysis.cli import flags
        from erroranalysis.errors import ErrorAnalysisError, ParameterError

        try:
            return command(*args, **kwargs)
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except ParameterError as exc:
            if debug_enabled():
                raise
            fail(flags.message(exc), exc.exit_code)
        except ErrorAnalysisError as exc:
            if debug_enabled():
                raise
            fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, exc.exit_code)
        except Exception as exc:  # an internal error: say so, and how to see the traceback
            if debug_enabled():
                raise
            fail(f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
                 "(re-run with --debug for the traceback)", 1)

    return wrapper


def console():
    from rich.console import Console

    return Console(stderr=False, highlight=False)
