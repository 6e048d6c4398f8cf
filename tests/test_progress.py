"""Progress outside a terminal: timed lines with rows, rate and time left; the older callbacks still work."""

from __future__ import annotations

import io

from erroranalysis.core.progress import Reporter, as_reporter, duration


class Clock:
    """A clock the test moves by hand: rates and times left are exact, and nothing waits."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_line_says_rows_rate_and_time_left():
    out, clock = io.StringIO(), Clock()
    reporter = Reporter(out, terminal=False, interval=3600, clock=clock)
    with reporter.stage("infer", total=1000) as advance:
        clock.now += 4
        advance(400)
        reporter.report()  # what the timer thread writes every interval
    lines = out.getvalue().splitlines()
    assert lines == ["infer: started, 1,000 rows",
                     "infer: 400 / 1,000 rows (40%), 100 rows/s, about 6s left [4s]",
                     "infer: done, 400 rows in 4s (100 rows/s)"]


def test_the_timer_writes_while_a_stage_runs_without_rows():
    """The timer thread, for real: a stage that reports nothing (slices) still says it is alive."""
    import threading

    class Stream(io.StringIO):
        def __init__(self):
            super().__init__()
            self.ticked = threading.Event()

        def write(self, text):
            if "running" in text:
                self.ticked.set()
            return super().write(text)

    out = Stream()
    with Reporter(out, terminal=False, interval=0.01).stage("slices"):
        assert out.ticked.wait(30), "no progress line from the timer"
    lines = out.getvalue().splitlines()
    assert lines[0] == "slices: started" and lines[-1].startswith("slices: done, in ")
    assert any(line.startswith("slices: running") for line in lines[1:-1])


def test_lines_go_through_logging_when_no_stream_is_given():
    """The command line's lines: logged (logger erroranalysis.core.progress), shown at any --log-level but error."""
    import logging

    from erroranalysis.core.progress import configure_logging

    out = io.StringIO()
    configure_logging("warning", stream=out)
    try:
        with Reporter(terminal=False, interval=3600).stage("metrics"):
            logging.getLogger("erroranalysis.stages").info("not shown at warning")
            logging.getLogger("erroranalysis.stages").warning("shown")
        lines = out.getvalue().splitlines()
        assert lines[0] == "metrics: started" and lines[1] == "warning: shown"
        assert lines[2].startswith("metrics: done")
        configure_logging("error", stream=out)
        with Reporter(terminal=False, interval=3600).stage("quiet"):
            pass
        assert "quiet" not in out.getvalue()
    finally:
        configure_logging("warning")


def test_no_bars_and_no_escape_codes_in_a_log():
    out = io.StringIO()  # not a terminal: isatty() is False
    reporter = Reporter(out, interval=60)
    assert not reporter.terminal
    with reporter.stage("checks", total=10) as advance:
        advance(10)
    assert "\x1b" not in out.getvalue()


def test_phases_report_each_phase_as_a_stage():
    out = io.StringIO()
    progress = Reporter(out, terminal=False, interval=60).phases("cluster")
    progress("embed", 0, 50)
    progress("embed", 30, 50)
    progress("embed", 50, 50)
    progress("embed", 50, 50)  # said again by the stage once it ends: one phase, one pair of lines
    progress("cluster", 0, 1)
    progress("cluster", 1, 1)
    lines = out.getvalue().splitlines()
    assert len(lines) == 4
    assert lines[0] == "cluster/embed: started, 50 rows"
    assert lines[1].startswith("cluster/embed: done, 50 rows")
    assert lines[2] == "cluster/cluster: started"
    assert lines[3].startswith("cluster/cluster: done, in ")  # a phase without rows counts none


def test_an_older_callback_hears_the_rows():
    seen = []
    with as_reporter(lambda done, total: seen.append((done, total))).stage("infer", total=7) as advance:
        advance(3)
        advance(4)
    assert seen == [(3, 7), (4, 7)]
    with as_reporter(None).stage("x", total=3) as advance:
        advance(3)  # the null reporter accepts and says nothing


def test_durations():
    assert [duration(s) for s in (4.4, 65, 3725)] == ["4s", "1m05s", "1h02m"]


def test_a_run_in_a_log_says_what_each_stage_does(tiny_checkpoint, tmp_path):
    """`erroranalysis run` with its output redirected (not a terminal): a start and an end line per stage, rows
    for inference, and no progress bar."""
    from conftest import eval_rows, write_jsonl
    from test_cli_run import invoke

    data = write_jsonl(tmp_path / "eval.jsonl", eval_rows(30))
    result = invoke("run", "--model", tiny_checkpoint, "--data", data, "--out", tmp_path / "run", "--id-column",
                    "id", "--max-length", "16", "--no-cluster", "--check-embedder", "none")
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    for stage in ("infer", "metrics", "checks", "slices"):
        assert any(line.startswith(f"{stage}: started") for line in lines), stage
        assert any(line.startswith(f"{stage}: done") for line in lines), stage
    assert "infer: started, 30 rows" in lines and any(line.startswith("infer: done, 30 rows in ") for line in lines)
    assert "\x1b" not in result.stderr
