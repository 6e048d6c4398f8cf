"""Where the test suite's CPU goes: run a command (by default `make test`'s pytest) and attribute every process's
CPU time to what it is (the pytest-xdist workers, Ray's worker processes and raylets, Chromium, the CLI runs the
tests start, S3 and proxy servers), with the machine's idle share beside it.

`pytest --durations` says how long each test took on its worker; on 2 cores shared by two workers and the
processes they start, that mixes a test's own work with what ran beside it. This says what the machine spent its
cores on, so that a change to the suite's speed aims at the largest consumer. Processes are sampled from /proc once
a second (one that lived less than a second is missed); each is named by its command line, read again while it
runs (a Ray worker renames itself `ray::...` after it starts). Linux only.

    .venv/bin/python benchmarks/suite_cpu.py                          # `make test`
    .venv/bin/python benchmarks/suite_cpu.py -- .venv/bin/pytest -n 2 tests/test_engines.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HZ = os.sysconf("SC_CLK_TCK")
# First match wins: a command line names what the process is.
KINDS = (("ray worker", ("ray::", "default_worker.py")), ("raylet", ("/raylet",)),
         ("ray control (gcs, dashboard, monitors)", ("gcs_server", "dashboard", "log_monitor", "monitor.py",
                                                      "runtime_env")),
         ("chromium", ("chromium",)), ("S3 server (moto)", ("moto",)), ("nginx", ("nginx",)),
         ("pytest-xdist worker", ("exec(eval(sys.stdin.readline()))",)),
         ("erroranalysis CLI and servers the tests start", ("erroranalysis", "streamlit", "transformers serve",
                                                             "ray start")),
         ("pytest controller", ("pytest",)))


def kind(command: str) -> str:
    for name, marks in KINDS:
        if any(mark in command for mark in marks):
            return name
    return "other"


def sample(seen: dict) -> None:
    """Each live process's kind and CPU seconds into `seen`, keyed by pid and start time (a pid can be reused)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            cpu = (int(fields[11]) + int(fields[12])) / HZ
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        if command:
            seen[(pid, fields[19])] = [kind(command), cpu]


def idle_ticks() -> tuple[int, int]:
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return values[3] + values[4], sum(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="*", help="the command to run (after --); default: the whole suite")
    args = parser.parse_args()
    command = args.command or ["make", "test"]
    seen: dict = {}
    sample(seen)
    before = {key: cpu for key, (_, cpu) in seen.items()}  # what was used before the command started
    idle0, total0 = idle_ticks()
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=ROOT)
    while proc.poll() is None:
        sample(seen)
        time.sleep(1.0)
    sample(seen)
    wall = time.monotonic() - started
    idle1, total1 = idle_ticks()
    used = Counter()
    for key, (name, cpu) in seen.items():
        used[name] += cpu - before.get(key, 0.0)
    cores = os.cpu_count() or 1
    idle = (idle1 - idle0) / max(1, total1 - total0)
    print(f"\n{' '.join(command)}: exit {proc.returncode}, {wall:.0f} s wall on {cores} cores "
          f"({wall * cores:.0f} core-seconds), idle {idle:.0%}")
    print(f"{'CPU seconds':>12}  {'share':>6}  what")
    total = sum(used.values())
    for name, cpu in used.most_common():
        if cpu >= 0.5:
            print(f"{cpu:12.0f}  {cpu / total:6.0%}  {name}")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
