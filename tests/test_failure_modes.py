"""Generation runs cluster by failure mode: one mode across five topics is one error type, two modes on one topic
are two, and names say the failure first. Built through the real analyze path (checks, signals, the cluster
stage, the packaged MiniLM)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from erroranalysis.cluster import categories, group_by_mode, mode_of
from erroranalysis.cluster._modenames import describe_mode

TOPICS = {
    "invoices": lambda r: {"invoice": f"INV-{r.randint(100, 999)}", "total": r.randint(10, 500),
                           "customer": r.choice(["Ann Lee", "Bo Park", "Cy Diaz"])},
    "bug triage": lambda r: {"component": r.choice(["login", "search", "sync"]), "severity": r.choice(["low", "high"]),
                             "version": f"{r.randint(1, 5)}.{r.randint(0, 9)}"},
    "recipes": lambda r: {"dish": r.choice(["soup", "paella", "bread"]), "servings": r.randint(2, 8),
                          "minutes": r.choice([20, 45, 90])},
    "flights": lambda r: {"origin": r.choice(["JFK", "LHR", "CDG"]), "destination": r.choice(["SFO", "DXB"]),
                          "seats": r.randint(1, 4)},
    "jobs": lambda r: {"title": r.choice(["nurse", "chef", "welder"]), "city": r.choice(["Oslo", "Lima"]),
                       "salary": r.randint(30, 90) * 1000},
}
MODES = {
    "prose before": lambda good, r: (r.choice(["Sure! Here is the JSON:", "Here's the data you asked for:",
                                               "Of course, based on the text:"]) + "\n" + good, "stop"),
    "cut off": lambda good, r: (good[: r.randint(6, len(good) - 6)], "length"),
    "refusal": lambda good, r: (r.choice(["I'm sorry, but I can't help with that request.",
                                          "As an AI language model, I cannot process this.",
                                          "I am unable to assist with this."]), "stop"),
    "wrong value": lambda good, r: (good.replace(str(next(iter(json.loads(good).values()))), "unknown", 1), "stop"),
}


def planted_rows(seed: int = 0, per_cell: int = 4) -> list[dict]:
    r = random.Random(seed)
    rows = []
    for topic, make in TOPICS.items():
        for mode in [""] * 2 + list(MODES):
            for _ in range(per_cell if mode else 2):
                fields = make(r)
                good = json.dumps(fields)
                prompt = r.choice(["Extract the fields of this {t} record as JSON:\n{x}",
                                   "Return JSON only. The {t} text follows.\n{x}"]).format(
                    t=topic, x="; ".join(f"{k} is {v}" for k, v in fields.items()))
                output, stop = MODES[mode](good, r) if mode else (good, "stop")
                rows.append({"id": f"r{len(rows)}", "prompt": prompt, "output": output, "reference": good,
                             "stop_reason": stop, "topic": topic, "mode": mode})
    return rows


def test_categories_and_mode_precedence():
    assert categories("json: text before the JSON") == {"shape: text before the JSON"}
    # a shape failure implies the comparisons that found no JSON; every empty output is one category
    assert categories("json: JSON cut short (x); json_fields: no JSON to compare; length: cut off at max_tokens "
                      "(64 tokens)") == {"shape: JSON cut short", "length: cut off at max_tokens"}
    assert categories("normalized: empty output; shape: empty output") == {"empty output"}
    # an explaining signal is the mode: a refusal explains the missing JSON, a loop the cut-off
    assert mode_of(categories("json: no JSON in the output; refusal: declines to answer ('I can't')")) == \
        "refusal: declines to answer"
    assert mode_of(categories("length: cut off at max_tokens; repetition: a loop ('a' repeated 9 times)")) == \
        "repetition: a loop"
    assert mode_of(categories("json_fields: renamed field (a -> b); json_schema: required (x)")) == \
        "json_fields: renamed field + json_schema: required"


def test_group_by_mode_attaches_generic_failures_by_their_outputs():
    reasons = ["refusal: declines to answer ('I can't')"] * 3 + ["json_fields: wrong value (a: 1 for 2)"] * 3 + \
        ["json: no JSON in the output; json_fields: no JSON to compare"] * 2
    vectors = np.array([[1, 0, 0]] * 3 + [[0, 1, 0]] * 3 + [[0.95, 0.1, 0], [0, 0, 1]], dtype=np.float32)
    labels, strength, modes, cluster_mode = group_by_mode(reasons, vectors)
    refusals, values = labels[0], labels[3]
    assert labels[:3].tolist() == [refusals] * 3 and labels[3:6].tolist() == [values] * 3 and refusals != values
    assert labels[6] == refusals and 0.9 < strength[6] < 1  # an unrecognized refusal joins by its output
    assert labels[7] not in (refusals, values)
    assert cluster_mode[refusals] == "refusal: declines to answer"


def test_names_say_the_failure_first():
    reasons = ["json: cut off at max_new_tokens (Unterminated string); json_fields: no JSON to compare; "
               "length: cut off at max_tokens (64 tokens)"] * 4
    prompts = ["Triage this bug report: login fails"] * 3 + ["Extract the invoice"]
    found = describe_mode(reasons, ["bug report", "login"], share=0.45, prompts=prompts)
    assert found["name"] == "cut off at max_tokens inside the JSON (bug report, login prompts)"
    assert found["summary"].startswith("Cut off at max_tokens inside the JSON: 4 outputs, mostly bug report, login "
                                       "prompts; 45% of the failures")
    spread = describe_mode(["refusal: declines to answer ('x')"] * 4, ["invoice"], share=0.1,
                           prompts=["invoice a", "bug b", "recipe c", "flight d"])
    assert spread["name"] == "refuses to answer"
    assert "across prompt topics" in spread["summary"]


def _analyze(tmp_path, layout: str):
    from erroranalysis import stages
    from erroranalysis.rundir import readers
    from erroranalysis.sources.table import DataOptions
    from erroranalysis.stages.after import AfterParams

    rows = planted_rows()
    path = tmp_path / "outputs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    after = AfterParams.with_seed(0, checks=False, slices=False,
                                  cluster_params={"embedder": "minilm", "layout": layout})
    run = stages.analyze("generation", path, tmp_path / "run", stages.Reading(data=DataOptions(id_column="id")),
                         after=after)
    preds = readers.read_predictions(run)
    clusters = readers.read_clusters(run)
    assignments = readers.read_assignments(run)
    return rows, preds, clusters, assignments


def _check_modes(rows, preds, clusters, assignments):
    mode_of_id = {r["id"]: r["mode"] for r in rows}
    failing = preds[~preds["correct"]]
    assert sorted(mode_of_id[i] for i in preds.loc[preds["correct"], "example_id"]) == [""] * 20
    assert set(mode_of_id[i] for i in failing["example_id"]) == set(MODES)
    cluster_of = dict(zip(assignments["example_id"], assignments["cluster_id"]))
    # each planted mode, spread over five topics, is exactly one cluster, and no cluster mixes two modes
    for mode in MODES:
        ids = [i for i in failing["example_id"] if mode_of_id[i] == mode]
        assert len({cluster_of[i] for i in ids}) == 1, mode
    assert len(clusters) == len(MODES)
    names = dict(zip(clusters["cluster_id"], clusters["name"]))
    by_mode = {mode: names[cluster_of[next(i for i in failing["example_id"] if mode_of_id[i] == mode)]]
               for mode in MODES}
    assert by_mode["prose before"].startswith("text before the JSON")
    assert by_mode["cut off"].startswith("cut off at max_tokens inside the JSON")
    assert by_mode["refusal"].startswith("refuses to answer")
    assert by_mode["wrong value"].startswith("wrong values in the JSON")
    # the first exemplar shows the failure
    for row in clusters.itertuples():
        first = row.exemplar_ids[0]
        assert mode_of_id[first] == next(m for m, n in by_mode.items() if n == row.name)


def test_modes_across_topics_through_analyze(tmp_path):
    _check_modes(*_analyze(tmp_path, layout="none"))


@pytest.mark.slow
def test_modes_across_topics_through_the_cli_with_umap(tmp_path):
    """The command a user types, with the default 2-D layout (UMAP)."""
    from typer.testing import CliRunner

    from erroranalysis.cli.app import app
    from erroranalysis.rundir import Run, readers

    rows = planted_rows(seed=1)
    path = tmp_path / "outputs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    made = CliRunner().invoke(app, ["analyze", "--task", "generation", "-p", str(path), "--id-column", "id",
                                    "--out", str(tmp_path / "run"), "--embedder", "minilm", "--no-slices",
                                    "--no-checks"])
    assert made.exit_code == 0, made.output
    run = Run.open(tmp_path / "run")
    _check_modes(rows, readers.read_predictions(run), readers.read_clusters(run), readers.read_assignments(run))
    assert np.isfinite(readers.read_assignments(run)["x"][~readers.read_predictions(run)["correct"]]).all()


def test_failures_left_out_of_a_sample_join_the_error_type_of_the_whole():
    """`--engine ray` above max_fit: `group_by_mode` on a sample stratified by mode, the rest placed by
    `place_by_mode`, equals `group_by_mode` on every failure (the same partition): a specific mode's failures its
    cluster, a generic failure near a specific mode's outputs attached to it, a generic mode split by its outputs
    (not by topic) split the same way."""
    from sklearn.metrics import adjusted_rand_score

    from erroranalysis.cluster import Assigned, mode_rule, place_by_mode
    from erroranalysis.cluster._sample import stratified_sample

    rng = np.random.default_rng(0)
    axes = np.eye(8, dtype=np.float32) * 5
    groups = [("refusal: declines to answer ('no')", axes[0], 300),
              ("json_fields: wrong value (a: 1 for 2)", axes[1], 200),
              ("normalized: differs from the reference", axes[0] + 0.5 * axes[2], 60),  # attaches to the refusals
              ("normalized: differs from the reference", axes[3], 150),  # a generic mode, split in two by output
              ("normalized: differs from the reference", axes[4], 150)]
    reasons = [r for r, _, n in groups for _ in range(n)]
    vectors = np.vstack([centre + rng.normal(size=(n, 8)).astype(np.float32) * 0.3 for _, centre, n in groups])
    prompts = rng.normal(size=vectors.shape).astype(np.float32)  # topics unrelated to the outputs: no veto

    def split(v):
        return (v[:, 3] < v[:, 4]).astype(int)

    whole = group_by_mode(reasons, vectors, prompts, min_cluster_size=5, split=split)[0]
    modes = np.array([mode_of(categories(r)) for r in reasons], dtype=object)
    ids = [f"f{i}" for i in range(len(reasons))]
    fit = stratified_sample(modes, ids, 200, seed=1, floor=10)
    rest = np.setdiff1d(np.arange(len(reasons)), fit)
    labels, strength, _, _ = group_by_mode([reasons[i] for i in fit], vectors[fit], prompts[fit], min_cluster_size=5,
                                           split=split)
    fitted = Assigned(labels, strength, np.full(len(fit), "mode", dtype=object), np.zeros(len(fit), bool))
    rule = mode_rule([reasons[i] for i in fit], labels, vectors[fit])
    placed, near, _ = place_by_mode([reasons[i] for i in rest], vectors[rest], vectors[fit], fitted, rule, 1.0)
    combined = np.empty(len(reasons), np.int64)
    combined[fit], combined[rest] = labels, placed.labels
    assert len(set(whole.tolist())) == 4 and (whole >= 0).all()
    assert adjusted_rand_score(whole, combined) == 1.0
    assert near.shape == (len(rest), 10) and (placed.strength > 0).all()
