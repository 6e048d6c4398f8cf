"""Names and summaries of error types written by an LLM, for users who have an endpoint: any OpenAI-compatible
server (vLLM, SGLang, Ollama, llama.cpp's server, `transformers serve`, OpenAI itself) through the `openai` client.

Off by default: nothing leaves the machine unless `--namer URL` is given. One call per error type, the largest
first, at most `namer_calls`, each showing up to `namer_examples` of its failing examples (sampled with the run's
seed) with their failure reasons and the keyword name; the answer must be a JSON object {"name", "summary"}.
Answers are cached by the model and the prompt's hash (the cluster stage keeps them in the run,
`cluster_names_llm.json`), so naming again calls only for what changed. A call that fails, times out or answers
anything else keeps the keyword name, and the stage's facts say how many did and why (the first error).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from erroranalysis.core.errors import UserError
from erroranalysis.core.params import Float, Int, Params, Text, param

PANEL = "Failure clusters: LLM names (optional)"
KEY_VARIABLES = ("ERRORANALYSIS_NAMER_API_KEY", "OPENAI_API_KEY")
NAME_LIMIT, SUMMARY_LIMIT, FIELD_LIMIT = 120, 600, 400
ANSWER_TOKENS = 128  # a name and a sentence or two; a model that rambles past it answers no JSON (keyword name kept)
SYSTEM = ("You name the error types of a machine-learning model. Each error type is a group of failing examples. "
          "Answer with one JSON object and nothing else: {\"name\": \"...\", \"summary\": \"...\"}. The name says "
          "how the model fails first and the topic second, in at most 12 words (for example: \"cut off at "
          "max_tokens inside the JSON, mostly invoice prompts\"). The summary is one or two sentences.")


@dataclass(frozen=True)
class NamerParams(Params):
    """An OpenAI-compatible endpoint that names and summarizes each error type (none by default)."""

    namer: str | None = param(None, Text(empty=False), "An OpenAI-compatible endpoint (e.g. "
                              "http://127.0.0.1:8000/v1) that names and summarizes each error type; its key from "
                              "$ERRORANALYSIS_NAMER_API_KEY or $OPENAI_API_KEY (none needed for a local server).",
                              none="keyword names; nothing leaves the machine", panel=PANEL)
    namer_model: str | None = param(None, Text(empty=False), "The model the endpoint serves.",
                                    none="the endpoint's first model (GET /models)", panel=PANEL)
    namer_calls: int = param(30, Int(1), "At most this many calls, the largest error types first; the rest keep "
                             "keyword names.", panel=PANEL)
    namer_examples: int = param(6, Int(1, 30), "Failing examples shown to the namer per error type.", panel=PANEL)
    namer_timeout: float = param(60.0, Float(0, low_open=True), "Seconds to wait for each call.", panel=PANEL)

    def validate(self) -> None:
        if self.namer is None:
            return
        if not re.match(r"https?://[^/\s]+", self.namer):
            self.fail("namer", self.namer, "an http:// or https:// URL of an OpenAI-compatible API")
        try:  # said before any work, not after the clustering
            import openai  # noqa: F401
        except ImportError:
            raise UserError("--namer needs the openai client: pip install 'erroranalysis-ml[namer]' (or pip install "
                            "openai).") from None


def prompt(row, examples: pd.DataFrame) -> str:
    """What the namer reads about one error type: its keyword name, size and keywords, then its examples."""
    lines = [f"Error type with {int(row.size)} failing examples. Keyword name: {row.name}.",
             f"Keywords: {', '.join(map(str, list(row.keywords)[:8]))}.", "", "Examples:"]
    for i, ex in enumerate(examples.itertuples(index=False), start=1):
        lines.append(f"{i}. " + "; ".join(f"{k}: {_short(v)}" for k, v in _fields(ex)))
    return "\n".join(lines)


def _fields(ex) -> list[tuple[str, str]]:
    """The parts of an example a reader names a failure from: the output and why it failed (generation), else the
    text and the label it got."""
    got = ex._asdict()
    keys = ("output", "failure_reason", "prompt") if "output" in got else ("text", "label", "pred")
    return [(k, got[k]) for k in keys if k in got and got[k] is not None and str(got[k]) != ""]


def _short(value) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= FIELD_LIMIT else text[:FIELD_LIMIT] + "…"


def llm_names(clusters: pd.DataFrame, failures: pd.DataFrame, labels: np.ndarray, params: NamerParams,
              cache: dict, *, seed: int = 0, client=None) -> tuple[dict[int, dict], dict, dict]:
    """({cluster_id: {"name", "summary"}}, the cache to keep, facts). `failures` are the failing examples, `labels`
    their cluster ids; `cache` maps a prompt key to an earlier answer."""
    rng = np.random.default_rng(seed)
    named, kept, facts = {}, {}, {"calls": 0, "cached": 0, "failed": 0, "error": None}
    model = None
    for row in clusters.sort_values("size", ascending=False).itertuples(index=False):
        members = failures[labels == row.cluster_id]
        if members.empty:
            continue
        take = np.sort(rng.permutation(len(members))[:params.namer_examples])
        text = prompt(row, members.iloc[take])
        if model is None:
            client, model = _connect(params, client, facts)
            if model is None:
                break
        key = hashlib.sha256(f"{model}\n{SYSTEM}\n{text}".encode()).hexdigest()
        if key in cache:
            named[int(row.cluster_id)], kept[key] = cache[key], cache[key]
            facts["cached"] += 1
            continue
        if facts["calls"] >= params.namer_calls:
            continue
        facts["calls"] += 1
        answer = _ask(client, model, text, facts)
        if answer is not None:
            named[int(row.cluster_id)], kept[key] = answer, answer
    facts["model"] = model
    return named, kept, facts


def _connect(params: NamerParams, client, facts: dict):
    """(client, model), or (None, None) with the error in facts when the endpoint cannot be reached."""
    try:
        if client is None:
            from openai import OpenAI

            key = next((os.environ[v] for v in KEY_VARIABLES if os.environ.get(v)), "none")
            client = OpenAI(base_url=params.namer, api_key=key, timeout=params.namer_timeout, max_retries=0)
        model = params.namer_model or client.models.list().data[0].id
        return client, model
    except Exception as exc:  # the openai client raises its own errors, and ImportError without the package
        facts["error"] = _why(exc)
        return None, None


def _ask(client, model: str, text: str, facts: dict) -> dict | None:
    try:
        reply = client.chat.completions.create(model=model, temperature=0, max_tokens=ANSWER_TOKENS,
                                               messages=[{"role": "system", "content": SYSTEM},
                                                         {"role": "user", "content": text}])
        answer = parse_answer(reply.choices[0].message.content or "")
    except Exception as exc:  # a failed call keeps the keyword name
        answer, facts["error"] = None, facts["error"] or _why(exc)
    if answer is None:
        facts["failed"] += 1
        facts["error"] = facts["error"] or "an answer that is not {\"name\", \"summary\"} JSON"
    return answer


def parse_answer(content: str) -> dict | None:
    """{"name", "summary"} from the model's answer (the first JSON object in it), or None."""
    found = re.search(r"\{.*\}", content, re.DOTALL)
    try:
        value = json.loads(found.group(0)) if found else None
    except ValueError:
        return None
    name = value.get("name") if isinstance(value, dict) else None
    if not isinstance(name, str) or not name.strip():
        return None
    summary = value.get("summary")
    return {"name": " ".join(name.split())[:NAME_LIMIT],
            "summary": " ".join(summary.split())[:SUMMARY_LIMIT] if isinstance(summary, str) else ""}


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
