"""`erroranalysis sft-check`: the training data as the trainer will see it, written as a run directory of its own
(task "sft"): sft_findings.parquet, sft_rows.parquet and sft_summary.json, committed with the `sft_check` stage.

Everything the user can get wrong (the data file, the tokenized file, the tokenizer, the mode for these rows, an
existing --out) is checked before the run directory is created; the checks themselves run before it too (they are
a few seconds even at 100k rows), so a failure leaves nothing behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from erroranalysis import rundir, sft
from erroranalysis.core import storage
from erroranalysis.rundir import Run, create_run
from erroranalysis.sft import SftParams, SftResult


def sft_check(model: str | Path, data: str | Path, out: str | Path, params: SftParams = SftParams(), *,
              overwrite: bool = False, tokens=None, progress: Callable[[str, int, int], None] | None = None
              ) -> tuple[Run, SftResult]:
    """Check the SFT rows of `data` with the tokenizer of `model` (a folder or a .gguf file; `tokens`, an
    `sft.Tokens` already loaded, instead) and write the run at `out`."""
    from erroranalysis.sources.table import as_source

    out = Path(out)
    rundir.check_out(out, overwrite)
    say = progress or (lambda phase, done, total: None)
    data = as_source(data)
    rows = sft.read_rows(data, source_column=params.source_column)
    tokenized = None if params.tokenized is None else sft.read_tokenized(params.tokenized, len(rows), str(data))
    say("loading the tokenizer", 0, 0)
    tokens = tokens or sft.load_tokens(model)
    result = sft.check(rows, tokens, params, tokenized=tokenized,
                       progress=lambda done, total: say("checking rows", done, total))
    manifest = {"task": "sft", "labels": [], "model": {"path": str(model), "tokenizer": tokens.describe()},
                "data": {"path": storage.record_name(data), "sha256": _sha(data), "rows": len(rows),
                         "format": rows.format, "tokenized": params.tokenized}}
    with create_run(out, overwrite=overwrite, **manifest) as run:
        with run.stage("sft_check", params.record()) as staging:
            staging.write_parquet(rundir.SFT_FINDINGS, result.findings)
            staging.write_parquet(rundir.SFT_ROWS, result.rows)
            staging.write_json(rundir.SFT_SUMMARY, result.summary)
            staging.facts["findings"] = int(len(result.findings))
    return run, result


def _sha(data) -> str | None:
    """The sha256 of `data` (`as_source`'s: a table in memory, a local file or an object; None for a folder)."""
    from erroranalysis.sources.table import InMemory

    if isinstance(data, InMemory):
        return data.sha256()
    return storage.digest(data)["sha256"] if data.is_file() else None


def read_sft_run(path: str | Path):
    """(summary, findings, rows) of an sft-check run."""
    from erroranalysis.rundir import readers

    return readers.read_sft(Run.open(path))
