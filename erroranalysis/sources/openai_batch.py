"""OpenAI Batch API files, which OpenAI's Batch API and `vllm run-batch` both write: the output file (`-p`: one
response a line, `{"custom_id", "response": {"status_code", "body": <a chat completion or completion>}, "error"}`)
joined by `custom_id`, in any order, to the input file (`--requests`: one request a line, `{"custom_id", "method",
"url", "body": {"messages" or "prompt", "max_tokens", "metadata": {...}}}`).

A row per answered request: `example_id` (the custom id), `messages` or `prompt` (the request's), `output` (the
first choice's content; a tool call as `{"tool_calls": [...]}`), `finish_reason` and `usage` read by
`completions`, `max_tokens` (the request's budget), and the request's `body.metadata` as columns (`reference`,
`schema`, `label`, anything else: metadata). A response line with an `error` (or a status other than 200) is not an
answer: it is counted and named in `frame.attrs["excluded"]`, which the run's manifest and `analyze` report. A
response whose request is not in `--requests` is one error naming the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from erroranalysis.core.errors import DataError, where
from erroranalysis.sources import completions
from erroranalysis.sources.table import as_source, jsonl_records

NAME = "openai-batch"
SHOWN_ERRORS = 3


def detect(path: Path, first) -> str | None:
    if isinstance(first, dict) and "custom_id" in first and ("response" in first or "error" in first):
        return None
    if isinstance(first, dict) and "custom_id" in first and "body" in first:
        return "a Batch input file (requests): pass the output file with -p and this one with --requests"
    return "no 'custom_id' with a 'response' (an OpenAI Batch output line)"


def read(path: Path, params, *, encoding: str = "utf-8", split=None) -> pd.DataFrame:
    if params.requests is None:
        raise DataError(f"{path}: an OpenAI Batch output file holds the answers but not the prompts; pass the "
                        "input file too: --requests batch_input.jsonl.")
    requests = _requests(as_source(params.requests), encoding)  # a URL: read from object storage
    rows, excluded, answered = [], [], set()
    for number, record in jsonl_records(path, encoding):
        custom_id = record.get("custom_id")
        if custom_id not in requests:
            raise DataError(f"{where(path, number, 'custom_id')}: {custom_id!r} is not in {params.requests}; pass "
                            "the input file this output was made from (--requests).")
        answered.add(custom_id)
        failure = _failure(record)
        if failure:
            excluded.append(f"line {number} ({custom_id}): {failure}")
            continue
        rows.append({**requests[custom_id], **_answer(record, path, number), "_line": number})
    if not rows:
        raise DataError(f"{path}: no answered request ({len(excluded)} errors"
                        + (f", first: {excluded[0]}" if excluded else "") + ").")
    frame = completions.read_columns(pd.DataFrame.from_records(rows))
    unanswered = [c for c in requests if c not in answered]  # neither an answer nor an error line
    frame.attrs["excluded"] = {"errors": len(excluded), "unanswered": len(unanswered),
                               "first": excluded[:SHOWN_ERRORS] + [f"{c}: no response" for c in unanswered][:1]}
    return frame


def _requests(path, encoding: str) -> dict[str, dict]:
    """custom_id -> the row parts a request gives: the prompt or messages, the budget, body.metadata."""
    if not path.exists():
        raise DataError(f"{path}: no such file; --requests names the Batch input file (the requests).")
    found: dict[str, dict] = {}
    for number, record in jsonl_records(path, encoding):
        custom_id, body = record.get("custom_id"), record.get("body")
        if not isinstance(custom_id, str) or not isinstance(body, dict):
            raise DataError(f"{where(path, number)}: not a Batch request (expected custom_id and body).")
        if custom_id in found:
            raise DataError(f"{where(path, number, 'custom_id')}: {custom_id!r} appears twice; custom ids are "
                            "unique in a batch.")
        row = {"example_id": custom_id}
        if isinstance(body.get("messages"), list):
            row["messages"] = body["messages"]
        elif isinstance(body.get("prompt"), str):
            row["prompt"] = body["prompt"]
        else:
            raise DataError(f"{where(path, number, 'body')}: the request has no 'messages' or 'prompt'.")
        for key in completions.BUDGET_FIELDS:
            if key in body:
                row[key] = body[key]
        metadata = body.get("metadata") or {}
        row.update({k: v for k, v in metadata.items() if k not in row} if isinstance(metadata, dict) else {})
        found[custom_id] = row
    return found


def _failure(record: dict) -> str | None:
    error = record.get("error")
    response = record.get("response")
    if error:
        return _describe(error)
    if not isinstance(response, dict):
        return "no response"
    if response.get("status_code", 200) != 200:
        body = response.get("body") or {}
        return f"status {response.get('status_code')}: " + _describe(body.get("error") if isinstance(body, dict)
                                                                      else body)
    return None


def _describe(error) -> str:
    if isinstance(error, dict):
        return " ".join(str(error.get(k)) for k in ("code", "message") if error.get(k))[:160]
    return str(error)[:160]


def _answer(record: dict, path: Path, number: int) -> dict:
    body = record["response"].get("body")
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise DataError(f"{where(path, number, 'response')}: the body has no choices (expected a chat completion "
                        "or a completion).")
    choice = choices[0]
    message = choice.get("message")
    if isinstance(message, dict):
        text = message.get("content") or ""
        if message.get("tool_calls") and not text.strip():
            text = json.dumps({"tool_calls": message["tool_calls"]}, ensure_ascii=False)
    else:
        text = choice.get("text") or ""
    return {"output": text, "finish_reason": choice.get("finish_reason"), "usage": body.get("usage"),
            **({"stop_reason": choice["stop_reason"]} if "stop_reason" in choice else {})}
