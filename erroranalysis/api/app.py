"""`Run.show()`: the app on one run, as `erroranalysis ui RUN` starts it, in a process of its own (as
spotlight.show does), found by its health endpoint before the URL is returned."""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from erroranalysis.core.errors import UserError


@dataclass
class App:
    url: str
    process: subprocess.Popen

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.process.pid, signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(run: Path, *, port: int | None = None, timeout: float = 120.0) -> App:
    """Start the app on `run` (its folder is the workspace) on 127.0.0.1 and wait until it answers."""
    port = port or free_port()
    command = [sys.executable, "-m", "erroranalysis.cli", "ui", str(run), "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    app = App(url=f"http://localhost:{port}/?run={Path(run).name}", process=process)
    atexit.register(app.stop)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return app
        except (urllib.error.URLError, OSError):
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            app.stop()
            output = (process.stdout.read() if process.stdout else "").strip().splitlines()
            raise UserError(f"the app did not start on port {port}: {output[-1] if output else 'no output'}")
        time.sleep(0.3)
