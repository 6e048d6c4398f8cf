"""Optional LLM names for error types (`--namer URL`): the protocol against a real OpenAI-compatible server
(`transformers serve` on the bundled SmolLM2, converted from its GGUF as the demo converts it), the prompt, the
cache in the run, and the fallback to keyword names when the endpoint fails. A 135M model's names may be poor; what
is held here is everything around them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from erroranalysis.cluster.llm_naming import NamerParams, parse_answer, prompt
from erroranalysis.core.errors import ParameterError

ROOT = Path(__file__).resolve().parent.parent


def test_the_answer_is_read_from_the_first_json_object_or_refused():
    assert parse_answer('Sure! {"name": "cut off  inside JSON", "summary": "Outputs stop early."} bye') == \
        {"name": "cut off inside JSON", "summary": "Outputs stop early."}
    assert parse_answer('{"name": "x"}') == {"name": "x", "summary": ""}
    for bad in ("no json here", '{"title": "x"}', '{"name": ""}', "{not json}", '{"name": 3}'):
        assert parse_answer(bad) is None


def test_the_prompt_shows_outputs_and_reasons_of_a_generation_run():
    row = pd.DataFrame({"cluster_id": [0], "size": [12], "name": ["texts about invoice, total"],
                        "keywords": [["invoice", "total"]]}).iloc[0]
    examples = pd.DataFrame({"prompt": ["Extract the total"], "output": ['{"total": 1'],
                             "failure_reason": ["json: cut off at max_new_tokens"]})
    text = prompt(next(pd.DataFrame([row]).itertuples(index=False)), examples)
    assert "12 failing examples" in text and "output: {\"total\": 1" in text and "cut off" in text


def test_the_endpoint_is_checked_as_a_url():
    with pytest.raises(ParameterError, match="namer"):
        NamerParams(namer="127.0.0.1:8000")
    assert NamerParams().namer is None  # off by default: nothing leaves the machine


def test_a_namer_without_the_openai_client_is_refused_before_any_work(monkeypatch):
    from erroranalysis.core.errors import UserError

    monkeypatch.setitem(sys.modules, "openai", None)  # what Python does for a package not installed
    with pytest.raises(UserError, match=r"pip install 'erroranalysis-ml\[namer\]'"):
        NamerParams(namer="http://127.0.0.1:8000/v1")


def _run_with_clusters(folder: Path):
    from ui_fixtures import make_run

    return make_run(folder, n=160, n_failures=48, n_clusters=3, with_checks=False, with_slices=False).path


def test_an_unreachable_endpoint_keeps_the_keyword_names(tmp_path):
    from browser import free_port

    from erroranalysis import stages
    from erroranalysis.rundir import Run, readers

    run = _run_with_clusters(tmp_path / "run")
    before = readers.read_clusters(Run.open(run))
    stages.name_run(run, stages.ClusterParams(namer=f"http://127.0.0.1:{free_port()}/v1", namer_model="m",
                                              namer_timeout=5))
    opened = Run.open(run)
    after = readers.read_clusters(opened)
    assert list(after["name"]) == list(before["name"]) == list(after["keyword_name"])
    facts = opened.manifest["stages"]["cluster_names"]["llm_names"]
    assert facts["named"] == 0 and facts["failed"] == facts["calls"] > 0 and "Connection" in facts["error"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`transformers serve` on 127.0.0.1 with SmolLM2-135M-Instruct (the demo's GGUF, converted once)."""
    from browser import free_port, wait_for

    sys.path.insert(0, str(ROOT / "sample_data"))
    try:
        from build_prompts import smollm2_gguf

        gguf = smollm2_gguf()
    except (ImportError, FileNotFoundError, SystemExit) as exc:
        pytest.skip(f"no SmolLM2 GGUF: {exc}")
    finally:
        sys.path.pop(0)
    serve = shutil.which("transformers") or str(Path(sys.executable).with_name("transformers"))
    pytest.importorskip("fastapi")
    pytest.importorskip("openai")
    from erroranalysis.infer.causal_lm import convert_gguf

    folder = convert_gguf(gguf)
    port = free_port()
    env = {**__import__("os").environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    log = (tmp_path_factory.mktemp("serve") / "serve.log").open("w")  # a file: the server logs every second, and
    # a pipe nobody reads would fill and stop it
    proc = subprocess.Popen([serve, "serve", str(folder), "--host", "127.0.0.1", "--port", str(port)], env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(f"http://127.0.0.1:{port}/v1/models", proc, "transformers serve", timeout=180)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.mark.slow
def test_a_real_server_names_error_types_and_the_answers_are_cached(server, tmp_path):
    from erroranalysis import stages
    from erroranalysis.rundir import Run, readers

    run = _run_with_clusters(tmp_path / "run")
    params = stages.ClusterParams(namer=server, namer_calls=1, namer_examples=2, namer_timeout=300)  # one answer of
    # SmolLM2 (10 s alone on these 2 CPUs; two took 32 to 63 s within the suite)
    stages.name_run(run, params)
    opened = Run.open(run)
    first = opened.manifest["stages"]["cluster_names"]["llm_names"]
    clusters = readers.read_clusters(opened)
    assert first["calls"] == 1 and first["named"] + first["failed"] == first["calls"]
    assert first["model"] and first["endpoint"] == server
    kept = json.loads((Path(run) / "cluster_names_llm.json").read_text())
    assert len(kept["answers"]) == first["named"] and kept["endpoint"] == server
    named = clusters[clusters["name"] != clusters["keyword_name"]]
    assert len(named) <= first["named"]
    for answer in kept["answers"].values():  # what was kept is what the clusters show
        assert answer["name"] in set(clusters["name"])
    stages.name_run(run, params)  # again: the kept answers are reused, only the failed ones are asked again
    again = Run.open(run).manifest["stages"]["cluster_names"]["llm_names"]
    assert again["cached"] == first["named"] and again["calls"] == first["failed"]
    assert np.array_equal(readers.read_clusters(Run.open(run))["cluster_id"], clusters["cluster_id"])
