"""Progress outside a terminal: timed lines with rows, rate and time left; the older callbacks still work."""

from __future__ import annotations

import io
import time

from erroranalysis.progress import Reporter, as_reporter, duration


def test_lines_every_interval_with_rows_rate_and_time_left():
    out = io.StringIO()
    reporter = Reporter(out, terminal=False, interval=0.05)
    with reporter.stage("infer", total=1000) as advance:
        for _ in range(4):
            advance(100)
            time.sleep(0.08)
    lines = out.getvalue().splitlines()
    assert lines[0] == "infer: started, 1,000 rows"
    ticks = [line for line in lines[1:-1] if line.startswith("infer: ")]
    assert len(ticks) >= 2  # a stage of ~0.3 s at a 0.05 s interval
    assert any("/ 1,000 rows" in t and "rows/s" in t and "left" in t for t in ticks)
    assert lines[-1].startswith("infer: done, 400 rows in ")


def test_a_stage_without_rows_still_shows_it_is_alive():
    out = io.StringIO()
    with Reporter(out, terminal=False, interval=0.05).stage("slices"):
        time.sleep(0.15)
    lines = out.getvalue().splitlines()
    assert lines[0] == "slices: started" and lines[-1].startswith("slices: done, in ")
    assert any(line.startswith("slices: running") for line in lines[1:-1])


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
    progress("embed", 50, 50)
    progress("cluster", 0, 1)
    progress("cluster", 1, 1)
    lines = out.getvalue().splitlines()
    assert lines[0] == "cluster/embed: started, 50 rows"
    assert lines[1].startswith("cluster/embed: done, 50 rows")
    assert lines[2] == "cluster/cluster: started" and lines[3].startswith("cluster/cluster: done")


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
