"""`--help` never cuts an option's name (issue 34): every flag of every command appears whole in an 80-column
terminal, through a pipe (rich's default width there is 80) and narrower, so `run --help | grep` finds it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from erroranalysis.cli.app import COMMANDS, app, load

FLAG = re.compile(r"--[a-z0-9](?:[a-z0-9-]*[a-z0-9])?")


def flags(name: str) -> set[str]:
    command = load(name)
    return {o for p in command.params if not getattr(p, "hidden", False) for o in (*p.opts, *p.secondary_opts)
            if o.startswith("--")}


@pytest.mark.parametrize("name", list(COMMANDS))
@pytest.mark.parametrize("columns", ["80", "60"])
def test_every_option_name_is_whole_at_80_and_60_columns(name, columns):
    result = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": columns, "TERMINAL_WIDTH": None})
    assert result.exit_code == 0, result.output
    missing = flags(name) - set(FLAG.findall(result.output))
    assert not missing, f"{name} --help at {columns} columns cuts {sorted(missing)}"


def test_help_through_a_pipe_keeps_names_and_words():
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    out = subprocess.run([sys.executable, "-m", "erroranalysis.cli", "run", "--help"], capture_output=True, text=True,
                         env=env, check=True).stdout
    assert "--min-cluster-size" in out and "--min-cluster-s…" not in out
    assert flags("run") <= set(FLAG.findall(out))
    assert "…" not in out  # at 80 columns a long word of help breaks instead of ending in an ellipsis
