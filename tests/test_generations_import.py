"""Generations made elsewhere (`analyze --task generation`): the free-form scorers against computations written
here, the readers on files the tools wrote themselves (an lm-evaluation-harness `--log_samples` file produced by
lm-eval over a local task and a tiny local model; Inspect AI logs built with Inspect's own log classes and
`write_eval_log`), OpenAI-style chat JSONL, bad input, and everything downstream as for a generation run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import write_jsonl
from typer.testing import CliRunner

from erroranalysis.cli.app import app
from erroranalysis.infer.output_checks import CHECKERS, CheckContext
from erroranalysis.infer.scorers import ScorerParams, last_number, token_f1
from erroranalysis.rundir import Run, readers

FAST = ["--no-data-checks", "--no-cluster", "--no-slices"]


def cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def score(name, output, scoring=None, **row):
    return CHECKERS[name].func(output, row, CheckContext(scoring=scoring))


def lcs(a: list[str], b: list[str]) -> int:
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            table[i + 1][j + 1] = table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
    return table[-1][-1]


# -- scorers ---------------------------------------------------------------------------------------------------


def test_token_f1_is_squads_definition():
    # "the" and "a" are dropped: [cat, sat, on, mat] against [cat, on, mat] share 3 tokens
    assert token_f1("The cat sat on the mat!", "a cat on a mat") == pytest.approx(2 * (3 / 4) * 1 / (3 / 4 + 1))
    assert token_f1("", "") == 1.0 and token_f1("x", "") == 0.0 and token_f1("dog", "cat") == 0.0
    assert score("token_f1", "cat on mat", reference="a cat on a mat") == (True, "")
    ok, why = score("token_f1", "the dog barked", scoring=ScorerParams(f1_threshold=0.9), reference="a cat on a mat")
    assert ok is False and why == "token_f1: low overlap (F1 0.00 < 0.9)"
    # several acceptable answers: the best counts
    assert score("token_f1", "Paris", reference='["Lyon", "Paris"]') == (True, "")


def test_rouge_l_is_the_longest_common_subsequence_f_measure():
    hyp, ref = "the quick brown dog", "the quick fox jumps"
    common = lcs(hyp.split(), ref.split())
    p, r = common / 4, common / 4
    ok, why = score("rouge_l", hyp, reference=ref)
    assert ok is True  # 0.5 reaches the default threshold
    assert 2 * p * r / (p + r) == 0.5
    ok, why = score("rouge_l", hyp, scoring=ScorerParams(rouge_threshold=0.6), reference=ref)
    assert ok is False and why == "rouge_l: low overlap (ROUGE-L 0.50 < 0.6)"


def test_numeric_and_contains():
    assert last_number("costs $1,234.50 in all") == 1234.5 and last_number("no digits") is None
    assert score("numeric", "So the answer is 72.", reference="#### 72") == (True, "")
    assert score("numeric", "about 71", reference="72") == (False, "numeric: wrong number (71 for 72)")
    assert score("numeric", "seventy-two", reference="72") == (False, "numeric: no number in the output")
    assert score("numeric", "anything", reference="no number here") == (None, "")
    assert score("numeric", "0.3000001", scoring=ScorerParams(numeric_tolerance=1e-5), reference="0.3")[0] is True
    assert score("contains", "I think it's Paris, France.", reference="paris") == (True, "")
    assert score("contains", "Parisian", reference="Paris") == (False, "contains: reference not in the output")


# -- a table of outputs, and everything downstream ----------------------------------------------------------


def planted_outputs(n: int = 80) -> list[dict]:
    """Math questions answered wrong when the topic is "algebra", right otherwise; a judge who agrees."""
    rows = []
    for i in range(n):
        topic = ["algebra", "geometry", "counting", "history"][i % 4]
        answer = i * 3
        wrong = topic == "algebra"
        rows.append({"id": f"q{i}", "prompt": f"Question {i} about {topic}: what is {i} times 3?",
                     "output": f"The answer is {answer + 1 if wrong else answer}.", "reference": str(answer),
                     "topic": topic, "score": 0.0 if wrong else 1.0})
    return rows


def test_a_table_of_outputs_is_checked_scored_and_analyzed(tmp_path):
    data = write_jsonl(tmp_path / "outputs.jsonl", planted_outputs())
    out = tmp_path / "runs" / "imported"
    made = cli("analyze", "--task", "generation", "--predictions", data, "--out", out, "--id-column", "id",
               "--output-checks", "numeric,contains,judge", "--no-data-checks", "--reducer", "pca", "--layout",
               "none", "--no-merge")
    assert made.exit_code == 0, made.output
    run = Run.open(out)
    assert run.task == "generation" and run.manifest["generation"]["source"] == "table"
    preds = readers.read_predictions(run)
    algebra = preds["topic"] == "algebra"
    assert (preds["correct"] == ~algebra).all()
    reasons = preds.loc[algebra, "failure_reason"]
    assert reasons.str.startswith("numeric: wrong number").all() and reasons.str.contains("judge: below").all()
    assert preds["check_contains"].sum() == (~algebra).sum()
    assert np.isnan(preds["reference_loss"]).all() and (preds["stop_reason"] == "unknown").all()
    metrics = run.metrics()
    per_check = {c["check"]: c for c in metrics["output_checks"]["per_check"]}
    assert per_check["numeric"]["passed"] == 60 and per_check["judge"]["applied"] == 80
    by_topic = {r["value"]: r["error_rate"] for r in metrics["by_metadata"]["topic"]}
    assert by_topic == {"algebra": 1.0, "geometry": 0.0, "counting": 0.0, "history": 0.0}
    slices, _ = readers.read_slices(run)
    top = slices.iloc[0]  # the planted concept: the prompt's word or the topic column, every one failing
    assert "algebra" in top["description"] and top["error_rate"] == 1.0 and top["support"] == 20
    assert readers.read_clusters(run)["size"].sum() <= 20


def test_two_imported_runs_compare_and_make_a_timeline(tmp_path):
    rows = planted_outputs(40)
    fixed = [dict(r, output=f"The answer is {r['reference']}.") if i < 10 else r for i, r in enumerate(rows)]
    steps = tmp_path / "exp"
    for name, table in (("step-000001", rows), ("step-000002", fixed)):
        data = write_jsonl(tmp_path / f"{name}.jsonl", table)
        made = cli("analyze", "--task", "generation", "-p", data, "--out", steps / name, "--id-column", "id",
                   "--output-checks", "numeric", *FAST)
        assert made.exit_code == 0, made.output
    compared = cli("compare", steps / "step-000001", steps / "step-000002", "--json", "--resamples", "50")
    assert compared.exit_code == 0, compared.output
    counts = json.loads(compared.stdout)["comparisons"][0]["counts"]
    assert counts["fixed"] == sum(r["topic"] == "algebra" for r in rows[:10]) and counts["broken"] == 0
    timeline = cli("timeline", steps, "--json")
    assert timeline.exit_code == 0, timeline.output
    doc = json.loads(timeline.stdout)
    assert [s["step"] for s in doc["steps"]] == [1, 2] and doc["steps"][1]["checks"]["numeric"] > \
        doc["steps"][0]["checks"]["numeric"]


def test_openai_chat_jsonl_with_tool_calls(tmp_path):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    lines = []
    for i in range(6):
        args = {"city": "Oslo"} if i % 2 == 0 else {"town": "Oslo"}
        lines.append({"id": i, "tools": tools, "messages": [
            {"role": "system", "content": "You call tools."},
            {"role": "user", "content": [{"type": "text", "text": f"Weather in Oslo? ({i})"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "get_weather",
                                                                 "arguments": json.dumps(args)}}]}]})
    data = write_jsonl(tmp_path / "chat.jsonl", lines)
    out = tmp_path / "chat-run"
    made = cli("analyze", "--task", "generation", "-p", data, "--out", out, "--id-column", "id", *FAST)
    assert made.exit_code == 0, made.output
    run = Run.open(out)
    assert run.manifest["generation"]["source"] == "chat"
    preds = readers.read_predictions(run)
    assert preds["correct"].tolist() == [True, False] * 3
    assert preds["failure_reason"].iloc[1].startswith("tool_call: arguments required")
    assert json.loads(preds["messages"].iloc[0])[1] == {"role": "user", "content": "Weather in Oslo? (0)"}


# -- Inspect AI logs, built with Inspect's own classes -------------------------------------------------------


def inspect_log(path: Path, epochs: int = 1) -> Path:
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalSample, EvalSpec, write_eval_log
    from inspect_ai.model import ChatMessageSystem, ChatMessageUser, ModelOutput, ModelUsage
    from inspect_ai.scorer import Score

    samples = []
    for epoch in range(1, epochs + 1):
        for i in range(8):
            right = i % 4 != 0
            output = ModelOutput.from_content("mockllm/model", f"ANSWER: {i if right else i + 1}",
                                              stop_reason="stop" if i != 7 else "max_tokens")
            output.usage = ModelUsage(input_tokens=20, output_tokens=3 + i, total_tokens=23 + i)
            samples.append(EvalSample(
                id=i, epoch=epoch, target=str(i), output=output, metadata={"level": "hard" if i < 4 else "easy"},
                input=[ChatMessageSystem(content="Answer with a number."), ChatMessageUser(content=f"What is {i}?")],
                scores={"match": Score(value="C" if right else "I", answer=str(i if right else i + 1))}))
    log = EvalLog(status="success", samples=samples, eval=EvalSpec(
        created="2026-01-01T00:00:00+00:00", task="numbers", model="mockllm/model", dataset=EvalDataset(name="numbers"),
        config=EvalConfig()))
    write_eval_log(log, str(path))
    return path


@pytest.mark.parametrize("suffix", [".eval", ".json"])
def test_an_inspect_log_is_read_with_inspects_reader(tmp_path, suffix):
    log = inspect_log(tmp_path / f"numbers{suffix}")
    out = tmp_path / "inspect-run"
    made = cli("analyze", "--task", "generation", "-p", log, "--out", out, "--output-checks", "numeric,judge", *FAST)
    assert made.exit_code == 0, made.output
    run = Run.open(out)
    assert run.manifest["generation"]["source"] == "inspect" and run.manifest["generation"]["judge"] == "score_match"
    preds = readers.read_predictions(run)
    assert preds["example_id"].tolist() == [str(i) for i in range(8)]
    assert preds["correct"].tolist() == [i % 4 != 0 for i in range(8)]
    assert preds["failure_reason"].iloc[0] == ("numeric: wrong number (1 for 0); judge: below the pass threshold "
                                               "(score_match 0 < 0.5)")
    assert preds["stop_reason"].tolist() == ["eos"] * 7 + ["length"]
    assert preds["n_output_tokens"].tolist() == [3 + i for i in range(8)]
    assert json.loads(preds["messages"].iloc[2]) == [{"role": "system", "content": "Answer with a number."},
                                                     {"role": "user", "content": "What is 2?"}]
    assert {r["value"]: r["n"] for r in run.metrics()["by_metadata"]["level"]} == {"hard": 4, "easy": 4}


def test_an_inspect_log_with_epochs_keeps_each_epoch(tmp_path):
    log = inspect_log(tmp_path / "two.eval", epochs=2)
    made = cli("analyze", "--task", "generation", "-p", log, "--out", tmp_path / "r", *FAST)
    assert made.exit_code == 0, made.output
    ids = readers.read_predictions(Run.open(tmp_path / "r"))["example_id"]
    assert len(ids) == 16 and ids.iloc[9] == "1:2"


# -- lm-evaluation-harness -------------------------------------------------------------------------------------


TASK = """task: tinyqa
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 6
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
filter_list:
  - name: strict-match
    filter:
      - function: regex
        regex_pattern: '#### (\\-?[0-9\\.\\,]+)'
      - function: take_first
  - name: flexible-extract
    filter:
      - function: regex
        group_select: -1
        regex_pattern: '(-?[$0-9.,]{{2,}})|(-?[0-9]+)'
      - function: take_first
"""


@pytest.mark.slow
def test_a_samples_file_lm_eval_wrote_offline(tmp_path):
    """lm-eval itself, over a local JSONL task and a tiny local causal LM, with the hub switched off."""
    from test_generation import build_tiny_causal_lm

    model = build_tiny_causal_lm(tmp_path / "model")
    (tmp_path / "task").mkdir()
    docs = write_jsonl(tmp_path / "task" / "qa.jsonl",
                       [{"question": f"What is {i} plus {i}?", "answer": str(2 * i), "level": i % 2}
                        for i in range(10)])
    (tmp_path / "task" / "tinyqa.yaml").write_text(TASK.format(data=docs))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run([str(Path(sys.executable).with_name("lm_eval")), "--model", "hf", "--model_args",
                           f"pretrained={model}", "--tasks", "tinyqa", "--include_path", str(tmp_path / "task"),
                           "--log_samples", "--output_path", str(tmp_path / "out"), "--device", "cpu",
                           "--batch_size", "4"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    samples = next((tmp_path / "out").rglob("samples_tinyqa_*.jsonl"))
    reported = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text())["results"]["tinyqa"]
    records = [json.loads(line) for line in samples.read_text().splitlines()]
    assert {r["filter"] for r in records} == {"strict-match", "flexible-extract"}  # each document twice in the file
    made = cli("analyze", "--task", "generation", "-p", samples, "--out", tmp_path / "run", "--output-checks",
               "judge,numeric", *FAST)
    assert made.exit_code == 0, made.output
    run = Run.open(tmp_path / "run")
    assert run.manifest["generation"]["source"] == "lm-eval" and run.manifest["generation"]["judge"] == "exact_match"
    scores = {f["filter"]: f["value"] for f in run.manifest["data"]["filters"]}
    assert scores == pytest.approx({name: reported[f"exact_match,{name}"] for name in scores})  # lm-eval's table
    preds = readers.read_predictions(run).set_index("example_id")
    assert len(preds) == 10 and set(preds["filter"]) == {"strict-match"}  # the first filter; no document twice
    for r in (r for r in records if r["filter"] == "strict-match"):
        row = preds.loc[str(r["doc_id"])]
        assert row["output"] == r["resps"][0][0] and row["filtered_output"] == r["filtered_resps"][0]
        assert row["reference"] == r["target"] and row["prompt"] == r["arguments"]["gen_args_0"]["arg_0"]
        assert bool(row["check_judge"]) == (r["exact_match"] >= 0.5)
        assert row["task"] == "tinyqa" and row["doc_level"] == r["doc"]["level"]


def test_lm_eval_samples_of_older_versions_and_multiple_choice(tmp_path):
    """Records in the documented format of lm-eval before 0.4.3 (arguments as [[prompt, kwargs]]; hand-written:
    the real file above comes from the installed version), and a loglikelihood task's, which has no text."""
    old = {"doc_id": 3, "doc": {"q": "2+2?"}, "target": "4", "arguments": [["Q: 2+2?\nA:", {"until": ["\n"]}]],
           "resps": [["4"]], "filtered_resps": ["4"], "filter": "none", "metrics": ["exact_match"], "exact_match": 1.0}
    path = write_jsonl(tmp_path / "samples_old_2024-05-01T10-00-00.000000.jsonl", [old])
    made = cli("analyze", "--task", "generation", "-p", path, "--out", tmp_path / "old", *FAST)
    assert made.exit_code == 0, made.output
    row = readers.read_predictions(Run.open(tmp_path / "old")).iloc[0]
    assert (row["example_id"], row["prompt"], row["correct"], row["task"]) == ("3", "Q: 2+2?\nA:", True, "old")
    choice = {**old, "arguments": {"gen_args_0": {"arg_0": "Q", "arg_1": " A"}}, "resps": [[["-1.5", "False"]]],
              "filtered_resps": [["-1.5", "False"]]}
    bad = write_jsonl(tmp_path / "samples_mc_2024-05-01T10-00-00.000000.jsonl", [choice])
    refused = cli("analyze", "--task", "generation", "-p", bad, "--out", tmp_path / "mc")
    assert refused.exit_code == 2 and "loglikelihood task" in refused.output and "line 1" in refused.output
    assert not (tmp_path / "mc").exists()


# -- bad input -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rows, flags, expected", [
    ([{"prompt": "a", "answer": "b", "reference": "b"}], [], "no output column 'output'"),
    ([{"prompt": "a", "output": 3, "reference": "b"}], [], "line 1, column 'output': holds a int"),
    ([{"prompt": "a", "output": "b", "score": "great"}], [], "line 1, column 'score': 'great' is not a score"),
    ([{"prompt": "a", "output": "b", "reference": "b"}], ["--score-column", "judge"], "no score column 'judge'"),
    ([{"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "?"}]}], ["--source-format",
                                                                                           "chat"],
     "the last message must be the assistant's answer"),
    ([{"prompt": "a", "output": "b"}], [], "no check applies"),
])
def test_bad_generations_are_one_line_and_write_nothing(tmp_path, rows, flags, expected):
    data = write_jsonl(tmp_path / "bad.jsonl", rows)
    result = cli("analyze", "--task", "generation", "-p", data, "--out", tmp_path / "run", *flags)
    assert result.exit_code == 2, result.output
    assert expected in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


JUDGE_CSV = 'prompt,output,score\nq1,"two\nlines",0\nq2,x,oops\nq3,"a\nb",1\n'


def test_a_csv_judge_column_names_the_physical_line_and_the_bad_value(tmp_path):
    """Quoted multi-line cells before the bad one: the record is the 2nd, the line the 4th; the column is read as
    text because of 'oops', and '0' is a valid score all the same."""
    data = tmp_path / "judged.csv"
    data.write_text(JUDGE_CSV)
    result = cli("analyze", "--task", "generation", "-p", data, "--out", tmp_path / "run")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip() == (f"error: {data}, line 4, column 'score': 'oops' is not a score; a judge's column "
                                     "holds numbers or true/false.")
    assert not (tmp_path / "run").exists()
    data.write_text(JUDGE_CSV.replace("oops", "true").replace(",1\n", ",0.25\n"))
    made = cli("analyze", "--task", "generation", "-p", data, "--out", tmp_path / "good", *FAST)
    assert made.exit_code == 0, made.output
    assert readers.read_predictions(Run.open(tmp_path / "good"))["check_judge"].tolist() == [False, True, False]


@pytest.mark.parametrize("output, found", [({"answer": 4}, "holds a dict (a JSON object, a struct), not text"),
                                           ([4], "holds a list (a JSON array), not text")])
def test_a_struct_output_with_no_reference_names_its_type(tmp_path, output, found):
    rows = [{"prompt": "a", "output": "fine"}, {"prompt": "b", "output": output}]
    data = write_jsonl(tmp_path / "structs.jsonl", rows)
    result = cli("analyze", "--task", "generation", "-p", data, "--out", tmp_path / "run")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert f"{data}, line 2, column 'output': {found}" in result.output and "no check applies" not in result.output
    assert not (tmp_path / "run").exists()


def test_rouge_l_without_rouge_score_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "rouge_score", None)  # what Python does for a package not installed
    data = write_jsonl(tmp_path / "o.jsonl", [{"prompt": "a", "output": "b", "reference": "b"}])
    result = cli("analyze", "--task", "generation", "-p", data, "--out", tmp_path / "r", "--output-checks", "rouge_l")
    assert result.exit_code == 2 and "pip install 'erroranalysis-ml[llm]'" in result.output
    assert not (tmp_path / "r").exists()


def test_in_memory_generations_equal_the_same_file(tmp_path):
    import erroranalysis as ea

    rows = planted_outputs(12)
    from_file = ea.analyze(write_jsonl(tmp_path / "o.jsonl", rows), task="generation", out=tmp_path / "a",
                           data_options=ea.DataOptions(id_column="id"), checks=None, slices=None, cluster=None,
                           generation={"output_checks": ("numeric",)})
    in_memory = ea.analyze(pd.DataFrame(rows), task="generation", id="id", out=tmp_path / "b", checks=None,
                           slices=None, cluster=None, generation=ea.GenerationParams(output_checks=("numeric",)))
    columns = ["example_id", "correct", "failure_reason", "check_numeric", "topic"]
    pd.testing.assert_frame_equal(from_file.predictions[columns], in_memory.predictions[columns])
    assert in_memory.manifest["data"]["path"] == "DataFrame"


def test_every_page_of_the_app_opens_an_imported_run(tmp_path, monkeypatch):
    from app_session import app_env, go, open_app, texts
    from test_ui_pages import PAGES

    data = write_jsonl(tmp_path / "outputs.jsonl", planted_outputs(60))
    made = cli("analyze", "--task", "generation", "-p", data, "--out", tmp_path / "runs" / "imported",
               "--id-column", "id", "--output-checks", "numeric,judge", "--no-data-checks", "--reducer", "pca",
               "--layout", "pca", "--no-merge")
    assert made.exit_code == 0, made.output
    app_env(monkeypatch, tmp_path / "runs", tmp_path / "labels.sqlite")
    at = open_app(run="imported")
    for page, title in PAGES.items():
        go(at, page)
        assert "Traceback" not in texts(at), page
        assert at.title and at.title[0].value == title, page
    go(at, "slices")
    assert "algebra" in texts(at, plain=True)  # the planted failures' slice
