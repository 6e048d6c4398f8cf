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
    """Print one line to stderr (control and format characters made visible) and exit."""
    from erroranalysis.terminal import visible

    print(f"error: {visible(message)}", file=sys.stderr)
    raise typer.Exit(code)


def handle_errors(command: Callable) -> Callable:
    """Map library exceptions to one-line messages and exit codes (2 user error, 1 internal error)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from erroranalysis.cli import flags
        from erroranalysis.errors import ErrorAnalysisError, ParameterError

        try:
            result = command(*args, **kwargs)
            sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at exit
            return result
        except (typer.Exit, typer.Abort):
            raise
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (see `terminated`): the stage is marked already
            name, code = ("SIGTERM", 143) if isinstance(exc, Terminated) else ("Ctrl-C", 130)
            print(f"interrupted ({name}): the stage that was running is marked interrupted; "
                  "'erroranalysis show RUN' says how to resume.", file=sys.stderr)
            raise typer.Exit(code) from None
        except BrokenPipeError:  # `erroranalysis show RUN | head`: the reader left, which is not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0) from None
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


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is, so a running stage is marked interrupted and cleans up."""


def terminated(signum, frame) -> None:
    raise Terminated()


def console():
    """The terminal output of every command: user strings reach it escaped (rich.markup.escape) or with
    markup=False; every string it renders, table cells included, has its control and format characters made
    visible (erroranalysis.terminal); a closed pipe (`| head`) ends the command quietly with exit 0."""
    from rich.console import Console

    from erroranalysis.terminal import visible

    class _Console(Console):
        def render_str(self, text: str, **kwargs):
            return super().render_str(visible(text), **kwargs)

        def on_broken_pipe(self) -> None:
            self.quiet = True
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise SystemExit(0)

    return _Console(stderr=False, highlight=False)
