"""What every command shares: option aliases, error handling, console output.

Commands import only typer and this module at import time; the library is imported inside the command body,
so `erroranalysis --help` answers at once.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer

# Shared option aliases, so every command spells the same thing the same way.
RunDir = Annotated[Path, typer.Argument(help="A run directory made by 'erroranalysis run' or 'analyze'.")]
OutDir = Annotated[str, typer.Option("--out", "-o", help="Run directory to write: a folder, or an s3://, gs://, az:// "
                                                         "URL (built locally, published with the manifest last).")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace an existing run at --out.")]
Json = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout (progress and notes go to "
                                                   "stderr).")]
JsonOut = Annotated[Optional[Path], typer.Option("--json-out", help="Also write the result as JSON to this file.")]


def print_json(obj) -> None:
    """The one form of `--json` output: strict JSON (NaN as null) on stdout."""
    import json

    from erroranalysis.core.files import jsonable

    typer.echo(json.dumps(jsonable(obj), indent=2, ensure_ascii=False, allow_nan=False))


def write_json_out(path: Path | None, obj) -> None:
    """`--json-out FILE`: the result written atomically; a folder is refused before any work (`check_json_out`)."""
    if path is not None:
        from erroranalysis.core import files

        files.write_json(path, obj)


def check_json_out(path: Path | None) -> None:
    from erroranalysis.core.validation import check_param

    if path is not None:
        check_param("--json-out", str(path), not path.is_dir(), "a file path, not a folder")


def debug_enabled() -> bool:
    return os.environ.get("ERRORANALYSIS_DEBUG") == "1"


def fail(message: str, code: int = 2) -> None:
    """Print one line to stderr (control and format characters made visible) and exit."""
    from erroranalysis.core.terminal import visible

    print(f"error: {visible(message)}", file=sys.stderr)
    raise typer.Exit(code)


def handle_errors(command: Callable) -> Callable:
    """Map library exceptions to one-line messages and exit codes (2 user error, 1 internal error)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from erroranalysis.core.errors import ErrorAnalysisError, ParameterError

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
            fail(parameter_message(exc), exc.exit_code)
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


def parameter_message(exc) -> str:
    """A ParameterError's one line, naming the flag the user typed: the declaration's (`exc.flag`), or the one the
    parameter's name spells by rule (`max_fit` -> `--max-fit`) for a value checked outside a declaration."""
    flag = exc.flag or (exc.param if exc.param.startswith("-") else "--" + exc.param.replace("_", "-"))
    return f"{flag} {exc.value!r} is invalid: expected {exc.expected}."


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is, so a running stage is marked interrupted and cleans up."""


def terminated(signum, frame) -> None:
    raise Terminated()


def console():
    """The terminal output of every command: user strings reach it escaped (rich.markup.escape) or with
    markup=False; every string it renders, table cells included, has its control and format characters made
    visible (erroranalysis.core.terminal); a closed pipe (`| head`) ends the command quietly with exit 0."""
    from rich.console import Console

    from erroranalysis.core.terminal import visible

    class _Console(Console):
        def render_str(self, text: str, **kwargs):
            return super().render_str(visible(text), **kwargs)

        def on_broken_pipe(self) -> None:
            self.quiet = True
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise SystemExit(0)

    return _Console(stderr=False, highlight=False)
