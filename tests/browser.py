"""What the real-browser tests share: Debian's Chromium, free ports, starting `erroranalysis ui` (or nginx) as a
process and waiting until it answers, stopping it, and waiting for Streamlit to finish a script run."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 60_000
EXE = Path(sys.executable).parent / "erroranalysis"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(url: str, proc: subprocess.Popen, what: str, ok=(200,), timeout: float = 90) -> None:
    """Poll `url` until it answers with a status in `ok`; fail with the process's output if it exits or is late."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status in ok:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code in ok:
                return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out = proc.stdout.read() if proc.stdout else ""
            pytest.fail(f"{what} did not start: {out[-2000:]}")
        time.sleep(0.3)


def start_app(*args: str, port: int) -> subprocess.Popen:
    """`erroranalysis ui ARGS --port PORT` in its own process group, once its health endpoint answers."""
    proc = subprocess.Popen([str(EXE), "ui", *map(str, args), "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    wait_for(f"http://127.0.0.1:{port}/_stcore/health", proc, "the app")
    return proc


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)


def settle(page, pause_ms: int = 800) -> None:
    """Wait until Streamlit has finished the script run under way (the app's script state, which the page's
    running indicator only shows after a delay), then give charts time to draw. Call it once something of the
    new run is on the page: before that, the state may still be the previous run's."""
    page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=TIMEOUT_MS)
    page.wait_for_timeout(pause_ms)
