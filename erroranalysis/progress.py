"""Progress of long stages, for a person at a terminal and for logs (CI, `nohup`, a file): the one progress system.

`Reporter.stage(name, total)` is a context manager yielding `advance(n)`. In a terminal it draws a rich bar per
stage (transient); anywhere else it logs one line when the stage starts, one every `interval` seconds (~10 s) with
rows done, rate and time left, and one when it ends, from a timer thread, so a stage that reports rarely (or not at
all: slices) still shows it is alive. The lines go through `logging` (logger `erroranalysis.core.progress`, set up for
the command line by `configure_logging`), or to `stream` when one is given. `phases(name)` serves callbacks of the
form `progress(phase, done, total)` (the cluster stage, the memorization check); `as_reporter` turns the older
`progress(done, total)` functions into a Reporter, so library callers that pass a function keep working.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, TextIO

INTERVAL = 10.0
LOGGER = "erroranalysis"
LEVELS = ("debug", "info", "warning", "error")
log = logging.getLogger(f"{LOGGER}.progress")


def configure_logging(level: str = "warning", stream: TextIO | None = None) -> None:
    """The command line's logging: progress lines and notes always (plain, on stderr), the library's other
    messages from `level` up, as `level: message`."""
    from erroranalysis.core.validation import check_choice

    check_choice("--log-level", level, LEVELS)
    root = logging.getLogger(LOGGER)
    for handler in list(root.handlers):
        if getattr(handler, "erroranalysis", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.erroranalysis = True
    handler.setFormatter(_Format())
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
    root.propagate = False
    log.setLevel(logging.INFO)  # progress lines show at any level but error
    if level == "error":
        log.setLevel(logging.ERROR)


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        return message if record.name == log.name else f"{record.levelname.lower()}: {message}"


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class _Counter:
    """Rows done of one stage, read by the timer thread."""

    def __init__(self, name: str, total: int | None, clock: Callable[[], float]):
        self.name, self.total, self.done = name, total, 0
        self.clock = clock
        self.started = clock()
        self.lock = threading.Lock()

    def advance(self, n: int = 1, total: int | None = None) -> None:
        with self.lock:
            self.done += int(n)
            if total is not None:
                self.total = int(total)

    def line(self, final: bool = False) -> str:
        with self.lock:
            done, total = self.done, self.total
        elapsed = max(self.clock() - self.started, 1e-9)
        if final:
            rate = f" ({done / elapsed:,.0f} rows/s)" if done else ""
            rows = f"{done:,} rows " if done else ""
            return f"{self.name}: done, {rows}in {duration(elapsed)}{rate}"
        if not done and not total:
            return f"{self.name}: running, {duration(elapsed)}"
        rate = done / elapsed
        parts = [f"{done:,}" + (f" / {total:,} rows ({done / total:.0%})" if total else " rows"),
                 f"{rate:,.0f} rows/s"]
        if total and rate > 0 and done < total:
            parts.append(f"about {duration((total - done) / rate)} left")
        return f"{self.name}: " + ", ".join(parts) + f" [{duration(elapsed)}]"


class Reporter:
    """Progress per stage: rich bars when `terminal`, else timed lines (to `stream`, or logged)."""

    def __init__(self, stream: TextIO | None = None, *, terminal: bool | None = None, interval: float = INTERVAL,
                 clock: Callable[[], float] = time.monotonic):
        self.stream = stream
        shown = stream if stream is not None else sys.stderr
        self.terminal = bool(getattr(shown, "isatty", lambda: False)()) if terminal is None else terminal
        self.interval = interval
        self.clock = clock
        self._write_lock = threading.Lock()
        self._active: list[_Counter] = []

    def note(self, message: str) -> None:
        """A line for the user (a warning, a choice made for them), in a terminal too."""
        self._write(message)

    def _write(self, line: str) -> None:
        with self._write_lock:
            if self.stream is None:
                log.info(line)
            else:
                print(line, file=self.stream, flush=True)

    def report(self) -> None:
        """A line for each stage running now (what the timer thread writes every `interval` seconds)."""
        for counter in list(self._active):
            self._write(counter.line())

    @contextmanager
    def stage(self, name: str, total: int | None = None) -> Iterator[Callable[..., None]]:
        counter = _Counter(name, total, self.clock)
        if self.terminal:
            with self._bar(counter) as advance:
                yield advance
            return
        self._write(f"{name}: started" + (f", {total:,} rows" if total else ""))
        stop = threading.Event()
        timer = threading.Thread(target=self._tick, args=(counter, stop), daemon=True, name=f"progress-{name}")
        self._active.append(counter)
        timer.start()
        try:
            yield counter.advance
        finally:
            stop.set()
            timer.join()
            self._active.remove(counter)
        self._write(counter.line(final=True))

    def _tick(self, counter: _Counter, stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            self._write(counter.line())

    @contextmanager
    def _bar(self, counter: _Counter):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
                       TimeElapsedColumn(), TimeRemainingColumn(), transient=True,
                       console=Console(file=self.stream if self.stream is not None else sys.stderr))
        task = bar.add_task(counter.name, total=counter.total)

        def advance(n: int = 1, total: int | None = None) -> None:
            counter.advance(n, total)
            bar.update(task, advance=n, **({"total": total} if total is not None else {}))

        with bar:
            yield advance

    def phases(self, name: str) -> Callable[[str, int, int], None]:
        """A `progress(phase, done, total)` callback that reports each phase as a stage `name/phase`; a phase ends
        when it reaches its total or the next phase starts (call it with phase "" to end the last)."""
        state: dict = {}

        def progress(phase: str, done: int, total: int) -> None:
            if phase == state.get("finished"):
                return  # a phase that reached its total says so once
            if state.get("phase") != phase:
                _close(state)
                if not phase:
                    return
                state["phase"], state["done"] = phase, 0
                state["context"] = self.stage(f"{name}/{phase}", total=total if total > 1 else None)
                state["advance"] = state["context"].__enter__()
            if total > 1 and done > state["done"]:  # a total of 1 is a phase without rows
                state["advance"](done - state["done"], total)
                state["done"] = done
            if total and done >= total:
                state["finished"] = phase
                _close(state)

        return progress


def _close(state: dict) -> None:
    context = state.pop("context", None)
    state.pop("phase", None)
    if context is not None:
        context.__exit__(None, None, None)


class _Null(Reporter):
    """Reports nothing (library calls without a reporter)."""

    def __init__(self):
        super().__init__(terminal=False)

    def note(self, message: str) -> None:
        pass

    @contextmanager
    def stage(self, name: str, total: int | None = None):
        yield lambda n=1, total=None: None

    def phases(self, name: str):
        return lambda phase, done, total: None


NULL = _Null()


class _Callback(_Null):
    """A Reporter over an older `progress(done, total)` function: it hears the rows of every stage."""

    def __init__(self, function: Callable[[int, int], None]):
        super().__init__()
        self.function = function

    @contextmanager
    def stage(self, name: str, total: int | None = None):
        yield lambda n=1, t=None: self.function(n, t if t is not None else (total or 0))


def as_reporter(progress) -> Reporter:
    """A Reporter from a Reporter, a function (rows done, total) or None."""
    if progress is None:
        return NULL
    if isinstance(progress, Reporter):
        return progress
    return _Callback(progress)


def reporter(stream: TextIO | None = None) -> Reporter:
    """The CLI's reporter: bars in a terminal, logged lines elsewhere."""
    return Reporter(stream)
