"""The files LLM engineers have, read once at the edge by their format's reader (erroranalysis.sources): vLLM dumps
and tables with OpenAI/vLLM fields (finish_reason, stop_reason, usage), OpenAI Batch output files joined to their
requests, lm-eval samples with several filters, and format detection by the first record, however long.

Response bodies are built and checked with the `openai` package's own types (a Batch output line's body is a
`ChatCompletion`); vLLM's output classes need a GPU build, so its dump is written in its documented layout."""

from __future__ import annotations

import json

import pytest
from conftest import write_jsonl
from typer.testing import CliRunner

from erroranalysis.cli.app import app
from erroranalysis.rundir import Run, readers

FAST = ["--no-data-checks", "--no-cluster", "--no-slices"]
SCHEMA = {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}


def cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def analyzed(tmp_path, path, *flags, name="run"):
    made = cli("analyze", "--task", "generation", "-p", path, "--out", tmp_path / name, *FAST, *flags)
    assert made.exit_code == 0, made.output
    run = Run.open(tmp_path / name)
    return run, readers.read_predictions(run).set_index("example_id")


# -- vLLM and OpenAI fields --------------------------------------------------------------------------------------


def vllm_request(i: int, text: str, finish: str, stop=None, n_tokens: int = 24) -> dict:
    """One `RequestOutput` as vLLM's docs lay it out, with the user's own reference and schema keys."""
    return {"request_id": f"r{i}", "prompt": f"Extract the invoice total from note {i}.",
            "prompt_token_ids": [1, 2, 3],
            "outputs": [{"index": 0, "text": text, "token_ids": list(range(n_tokens)), "cumulative_logprob": None,
                         "logprobs": None, "finish_reason": finish, "stop_reason": stop}],
            "finished": True, "schema": json.dumps(SCHEMA), "reference": json.dumps({"total": i})}


def test_a_vllm_dump_reads_finish_reason_stop_string_and_token_counts(tmp_path):
    rows = [vllm_request(0, '{"total": 0}', "stop"),
            vllm_request(1, '{"total": 1, "items": ["a", "b", "c"', "length", n_tokens=24),
            vllm_request(2, '{"total": 2}', "stop", stop="</json>", n_tokens=7),
            vllm_request(3, '{"total": 3}', "stop", stop=128009, n_tokens=6)]
    run, preds = analyzed(tmp_path, write_jsonl(tmp_path / "vllm.jsonl", rows))
    assert run.manifest["data"]["source_format"] == "vllm"
    assert preds.loc["r0", "stop_reason"] == "eos" and preds.loc["r1", "stop_reason"] == "length"
    assert preds.loc["r2", "stop_reason"] == "stop" and preds.loc["r2", "stop_sequence"] == "</json>"
    assert preds.loc["r3", "stop_sequence"] == "128009"
    assert preds["n_output_tokens"].to_dict() == {"r0": 24, "r1": 24, "r2": 7, "r3": 6}
    assert "cut off" in preds.loc["r1", "failure_reason"] and "not valid JSON" not in preds.loc["r1", "failure_reason"]
    assert "stop_sequence" not in run.manifest["data"]["metadata_columns"]


def test_a_table_with_openai_fields_is_read_as_they_mean(tmp_path):
    """What `pd.DataFrame(results)` of an OpenAI client loop holds: finish_reason and the usage object."""
    rows = [{"id": "a", "prompt": "p", "output": '{"total": 1', "finish_reason": "length",
             "usage": {"prompt_tokens": 9, "completion_tokens": 22, "total_tokens": 31}, "reference": '{"total": 1}'},
            {"id": "b", "prompt": "p", "output": '{"total": 2}', "finish_reason": "stop",
             "usage": {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14}, "reference": '{"total": 2}'}]
    run, preds = analyzed(tmp_path, write_jsonl(tmp_path / "outs.jsonl", rows), "--id-column", "id")
    assert preds.loc["a", "stop_reason"] == "length" and preds.loc["a", "n_output_tokens"] == 22
    assert preds.loc["b", "stop_reason"] == "eos" and preds.loc["b", "n_output_tokens"] == 5
    assert {"usage", "finish_reason"}.isdisjoint(run.manifest["data"]["metadata_columns"])
    assert run.manifest["data"]["lengths"] == "tokens"


# -- OpenAI Batch ------------------------------------------------------------------------------------------------


def completion(i: int, content: str, finish: str, tokens: int) -> dict:
    """A chat completion body as the `openai` client parses it (model_validate checks the layout)."""
    from openai.types.chat import ChatCompletion

    body = {"id": f"chatcmpl-{i}", "object": "chat.completion", "created": 1764892800, "model": "smollm2",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish,
                         "logprobs": None}],
            "usage": {"prompt_tokens": 30, "completion_tokens": tokens, "total_tokens": 30 + tokens}}
    return ChatCompletion.model_validate(body).model_dump(mode="json", exclude_none=True)


def batch_files(tmp_path, n: int = 5):
    requests = [{"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions",
                 "body": {"model": "smollm2", "max_tokens": 24,
                          "messages": [{"role": "user", "content": f"Total of invoice {i}, as JSON?"}],
                          "metadata": {"reference": json.dumps({"total": i}), "schema": json.dumps(SCHEMA),
                                       "topic": "billing"}}}
                for i in range(n)]
    outputs = [{"id": f"batch_req_{i}", "custom_id": f"req-{i}",
                "response": {"status_code": 200, "request_id": f"q{i}",
                             "body": completion(i, json.dumps({"total": i if i != 2 else 7}), "stop", 6)},
                "error": None} for i in range(n - 1)]
    outputs[1]["response"]["body"] = completion(1, '{"total": ', "length", 24)
    outputs.append({"id": "batch_req_x", "custom_id": f"req-{n - 1}", "response": None,
                    "error": {"code": "rate_limit_exceeded", "message": "Too many requests"}})
    outputs.reverse()  # the Batch API answers in any order
    return write_jsonl(tmp_path / "batch_input.jsonl", requests), write_jsonl(tmp_path / "batch_output.jsonl", outputs)


def test_a_batch_output_is_joined_to_its_requests_by_custom_id(tmp_path):
    requests, outputs = batch_files(tmp_path)
    lost = {"custom_id": "req-9", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "smollm2", "messages": [{"role": "user", "content": "never answered"}]}}
    requests.write_text(requests.read_text() + json.dumps(lost) + "\n")  # a request the batch never answered
    run, preds = analyzed(tmp_path, outputs, "--requests", requests)
    assert run.manifest["data"]["source_format"] == "openai-batch"
    assert sorted(preds.index) == ["req-0", "req-1", "req-2", "req-3"]
    assert json.loads(preds.loc["req-0", "messages"])[0]["content"] == "Total of invoice 0, as JSON?"
    assert preds.loc["req-1", "stop_reason"] == "length" and preds.loc["req-1", "max_tokens"] == 24
    assert "cut off" in preds.loc["req-1", "failure_reason"]
    assert not preds.loc["req-2", "correct"] and preds.loc["req-3", "correct"]  # the reference is compared
    excluded = run.manifest["data"]["excluded"]
    assert excluded["errors"] == 1 and "rate_limit_exceeded" in excluded["first"][0]
    assert excluded["unanswered"] == 1 and "req-9: no response" in excluded["first"]
    assert "topic" in run.manifest["data"]["metadata_columns"]


def test_bad_batch_files_are_one_line_and_write_nothing(tmp_path):
    requests, outputs = batch_files(tmp_path)
    stray = tmp_path / "stray.jsonl"
    stray.write_text(outputs.read_text() + json.dumps({"custom_id": "req-99", "response": {
        "status_code": 200, "body": completion(99, "{}", "stop", 1)}, "error": None}) + "\n")
    for args, needle in [((outputs,), "--requests batch_input.jsonl"),
                         ((stray, "--requests", requests), "stray.jsonl, line 6, column 'custom_id': 'req-99' is "
                                                           "not in"),
                         ((requests,), "a Batch input file (requests)")]:
        made = cli("analyze", "--task", "generation", "-p", *args, "--out", tmp_path / "bad", *FAST)
        assert made.exit_code == 2 and needle in made.output, made.output
        assert "Traceback" not in made.output and not (tmp_path / "bad").exists()


# -- lm-eval with several filters --------------------------------------------------------------------------------


def gsm8k_sample(doc: int, flt: str, generation: str, answer: str, target: str) -> dict:
    return {"doc_id": doc, "doc": {"question": f"Tom has {doc} apples and buys {doc} more. " * 8, "level": doc % 2},
            "target": target, "arguments": {"gen_args_0": {"arg_0": f"Question: {doc}+{doc}?\nAnswer:",
                                                            "arg_1": {"until": ["Question:"]}}},
            "resps": [[generation]], "filtered_resps": [answer], "filter": flt, "metrics": ["exact_match"],
            "exact_match": float(answer == target)}


def gsm8k_file(tmp_path):
    rows = []
    for flt in ("strict-match", "flexible-extract"):
        for doc in range(4):
            target = str(2 * doc)
            generation = f"{doc} plus {doc} is {2 * doc}." if doc != 3 else "I think it is 7."
            strict = "[invalid]" if doc in (1, 3) else target  # no "#### N" in the generation
            flexible = target if doc != 3 else "7"
            rows.append(gsm8k_sample(doc, flt, generation, strict if flt == "strict-match" else flexible, target))
    return write_jsonl(tmp_path / "samples_gsm8k_2026-12-01T10-00-00.000000.jsonl", rows)


def test_lm_eval_filters_are_reported_as_lm_eval_does_and_analyzed_one_at_a_time(tmp_path):
    path = gsm8k_file(tmp_path)
    run, preds = analyzed(tmp_path, path)
    assert len(preds) == 4 and set(preds["filter"]) == {"strict-match"}  # no document counted twice
    table = {(f["filter"], f["metric"]): (f["value"], f["n"]) for f in run.manifest["data"]["filters"]}
    assert table == {("strict-match", "exact_match"): (0.5, 4), ("flexible-extract", "exact_match"): (0.75, 4)}
    assert preds.loc["1", "output"] == "1 plus 1 is 2." and preds.loc["1", "filtered_output"] == "[invalid]"
    assert "no answer extracted" in preds.loc["1", "failure_reason"]
    assert preds.loc["0", "n_output_tokens"] == 5  # the generation's words, not the answer's
    metadata = run.manifest["data"]["metadata_columns"]
    assert "doc_level" in metadata and "doc_question" not in metadata and "filtered_output" not in metadata
    assert "doc_question" in preds.columns  # kept for reading
    flexible, fpreds = analyzed(tmp_path, path, "--filter", "flexible-extract", name="flexible")
    assert list(fpreds["correct"]) == [True, True, True, False]
    assert "answer '7', target '6'" in fpreds.loc["3", "failure_reason"]
    shown = cli("show", tmp_path / "run").output
    assert "lm-eval's scores, per filter" in shown and "flexible-extract" in shown and "0.75" in shown
    assert "the failures of filter strict-match" in shown
    made = cli("analyze", "--task", "generation", "-p", path, "--out", tmp_path / "x", "--filter", "strict", *FAST)
    assert made.exit_code == 2 and "no filter 'strict'" in made.output and "flexible-extract" in made.output


@pytest.mark.parametrize("doc_id", [None, {"a": 1}, "", True])
def test_an_lm_eval_doc_id_that_is_no_id_is_refused(tmp_path, doc_id):
    rows = [gsm8k_sample(0, "none", "0", "0", "0"), {**gsm8k_sample(1, "none", "2", "2", "2"), "doc_id": doc_id}]
    path = write_jsonl(tmp_path / "samples_t_2026-12-01T10-00-00.000000.jsonl", rows)
    made = cli("analyze", "--task", "generation", "-p", path, "--out", tmp_path / "run", *FAST)
    assert made.exit_code == 2 and "line 2, column 'doc_id'" in made.output and "not a document id" in made.output
    assert not (tmp_path / "run").exists()


# -- detection by the first record -------------------------------------------------------------------------------


def test_a_first_line_over_a_mib_is_still_read_as_its_format(tmp_path):
    first = gsm8k_sample(0, "none", "x" * (1 << 21), "0", "0")
    path = write_jsonl(tmp_path / "samples_t_2026-12-01T10-00-00.000000.jsonl",
                       [first, gsm8k_sample(1, "none", "2", "2", "2")])
    run, preds = analyzed(tmp_path, path)
    assert run.manifest["data"]["source_format"] == "lm-eval" and len(preds.loc["0", "output"]) == 1 << 21


def test_a_chat_file_ending_on_the_users_turn_is_told_as_chat(tmp_path):
    rows = [{"messages": [{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": "hi"}]}]
    made = cli("analyze", "--task", "generation", "-p", write_jsonl(tmp_path / "c.jsonl", rows), "--out",
               tmp_path / "run", *FAST)
    assert made.exit_code == 2 and "line 1" in made.output and "the last message is the 'user''s" in made.output


def test_a_table_without_outputs_says_which_formats_were_tried(tmp_path):
    rows = [{"prompt": "a", "answer": "b", "reference": "b"}]
    made = cli("analyze", "--task", "generation", "-p", write_jsonl(tmp_path / "t.jsonl", rows), "--out",
               tmp_path / "run", *FAST)
    assert made.exit_code == 2 and "no output column 'output'" in made.output
    for name in ("lm-eval", "chat", "vllm", "openai-batch"):
        assert f"not {name}:" in made.output
