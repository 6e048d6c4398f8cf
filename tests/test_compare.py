"""Run comparison: paired bootstrap, McNemar, cluster matching, the report, the ablation series and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fake_runs import commit, inferred_run
from typer.testing import CliRunner

from erroranalysis import compare, rundir, stages
from erroranalysis.cli.app import app
from erroranalysis.core.errors import DataError, ParameterError, UserError
from erroranalysis.labels import LabelStore
from erroranalysis.metrics import confusion_counts
from erroranalysis.report import compare_markdown

LABELS = ["business", "sport", "tech"]


# -- helpers shared with test_taxonomy_apply.py and test_ui_compare.py ----------------------------------------------


def write_run(path: Path, frame: pd.DataFrame, *, labels=LABELS, clusters: dict[str, int] | None = None,
              cluster_names: dict[int, str] | None = None, vectors: Path | None = None, sha: str = "ab12"):
    """A run directory with predictions (and clusters, and embeddings.json naming a precomputed-vectors file)."""
    frame = frame.copy()
    frame["correct"] = frame["label"] == frame["pred"]
    for col, value in (("confidence", np.float32(0.8)), ("loss", np.float32(0.3)), ("n_tokens", np.int32(5)),
                       ("truncated", False)):
        if col not in frame.columns:
            frame[col] = value
    run = inferred_run(path, frame, labels=labels, model={"path": f"checkpoints/{path.name}"},
                       data={"path": "data/eval.jsonl", "sha256": sha, "rows": len(frame)}, seed=0)
    clustering = {}
    if clusters is not None:
        ids = frame["example_id"].astype(str)
        cid = np.array([clusters.get(i, -1) for i in ids], dtype=np.int64)
        clustering["assignments_parquet"] = pd.DataFrame({
            "example_id": ids, "cluster_id": cid, "failure": ~frame["correct"].to_numpy(),
            "membership": np.float32(1.0), "x": np.float32(0), "y": np.float32(0)})
        names = cluster_names or {}
        clustering["clusters_parquet"] = pd.DataFrame([
            {"cluster_id": c, "size": int((cid == c).sum()), "name": names.get(c, f"cluster {c}"), "keywords": ["w"],
             "top_confusions": [], "exemplar_ids": []} for c in sorted(set(cid) - {-1})])
    if vectors is not None:
        from erroranalysis.embed import models as embedding
        from erroranalysis.embed import vector_files

        emb = vector_files.PrecomputedEmbedder(vectors, frame["example_id"].astype(str).tolist())
        fail = frame[~frame["correct"]]
        rows = emb.embed(fail)
        clustering["embeddings_npy"] = rows.astype(np.float32)
        clustering["embeddings_json"] = {"embedder": embedding.describe(emb), "dim": rows.shape[1],
                                         "rows": len(fail), "example_ids": fail["example_id"].astype(str).tolist()}
    if clustering:
        commit(run, "cluster", **clustering)
    return run


def eval_frame(n: int = 120, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    gold = np.array(LABELS, dtype=object)[rng.integers(0, 3, n)]
    return pd.DataFrame({"example_id": [f"ex{i:03d}" for i in range(n)],
                         "text": [f"text of example {i}" for i in range(n)], "label": gold, "pred": gold.copy()})


def wrong(label: str) -> str:
    return LABELS[(LABELS.index(label) + 1) % 3]


@pytest.fixture()
def pair(tmp_path):
    """base fails on ex000-ex029; cand fixes ex000-ex019 and breaks ex100-ex104; ex020-ex029 still fail, and
    ex025-ex029 fail with another wrong prediction."""
    df = eval_frame()
    base, cand = df.copy(), df.copy()
    base.loc[:29, "pred"] = [wrong(x) for x in base.loc[:29, "label"]]
    cand.loc[20:29, "pred"] = base.loc[20:29, "pred"]
    cand.loc[25:29, "pred"] = [wrong(wrong(x)) for x in cand.loc[25:29, "label"]]
    cand.loc[100:104, "pred"] = [wrong(x) for x in cand.loc[100:104, "label"]]
    ids = df["example_id"].tolist()
    # base clusters: #0 = ex000-ex019 (all fixed later), #1 = ex020-ex029; cand: #5 = ex020-ex029, #6 = ex100-104
    cl_base = {**{ids[i]: 0 for i in range(20)}, **{ids[i]: 1 for i in range(20, 30)}}
    cl_cand = {**{ids[i]: 5 for i in range(20, 30)}, **{ids[i]: 6 for i in range(100, 105)}}
    b = write_run(tmp_path / "base", base, clusters=cl_base,
                  cluster_names={0: "sport read as tech", 1: "tech <b>read</b> | business"})
    c = write_run(tmp_path / "cand", cand, clusters=cl_cand, cluster_names={5: "still there", 6: "new problem"})
    return b.path, c.path


# -- pure statistics ------------------------------------------------------------------------------------------------


def test_paired_bootstrap_matches_resampling_rows():
    rng = np.random.default_rng(3)
    n, k = 1500, 4
    t = rng.integers(0, k, n)
    pa = np.where(rng.random(n) < 0.75, t, rng.integers(0, k, n))
    pb = np.where(rng.random(n) < 0.85, t, rng.integers(0, k, n))
    got = compare.paired_bootstrap(t, pa, pb, k, n_resamples=3000, seed=1)
    acc, f1 = [], []
    for _ in range(3000):
        idx = rng.integers(0, n, n)
        sa = compare.stats_from_confusion(confusion_counts(t[idx], pa[idx], k))
        sb = compare.stats_from_confusion(confusion_counts(t[idx], pb[idx], k))
        acc.append(sb["accuracy"] - sa["accuracy"])
        f1.append(sb["f1"] - sa["f1"])
    np.testing.assert_allclose(got["ci"]["accuracy"], np.percentile(acc, [2.5, 97.5]), atol=0.006)
    np.testing.assert_allclose(got["ci"]["f1"], np.percentile(np.array(f1), [2.5, 97.5], axis=0).T, atol=0.012)
    assert got["b"]["accuracy"] - got["a"]["accuracy"] == pytest.approx(((pb == t).mean() - (pa == t).mean()))


def test_paired_bootstrap_is_deterministic_and_zero_for_identical_runs():
    t = np.array([0, 1, 2, 0, 1, 2, 0, 1])
    p = np.array([0, 1, 1, 0, 2, 2, 0, 1])
    a = compare.paired_bootstrap(t, p, p, 3, n_resamples=200, seed=5)
    assert np.all(a["ci"]["accuracy"] == 0) and np.all(a["ci"]["f1"] == 0)
    b = compare.paired_bootstrap(t, p, t, 3, n_resamples=200, seed=5)
    c = compare.paired_bootstrap(t, p, t, 3, n_resamples=200, seed=5)
    np.testing.assert_array_equal(b["ci"]["macro_f1"], c["ci"]["macro_f1"])


@pytest.mark.parametrize("bad", [{"n_resamples": 0}, {"n_resamples": 1.5}, {"seed": -1}, {"level": 1.0}])
def test_paired_bootstrap_rejects_bad_parameters(bad):
    with pytest.raises(ParameterError):
        compare.paired_bootstrap(np.zeros(3, int), np.zeros(3, int), np.zeros(3, int), 2, **bad)


def test_mcnemar_exact_for_few_discordant_pairs_and_chi_square_for_many():
    a = np.array([False] * 9 + [True] + [True] * 20)
    b = np.array([True] * 9 + [False] + [True] * 20)
    r = compare.mcnemar(a, b)
    assert (r["fixed"], r["broken"], r["method"]) == (9, 1, "exact binomial")
    assert r["p_value"] == pytest.approx(2 * 11 / 1024)
    a = np.array([False] * 40 + [True] * 20 + [True] * 100)
    b = np.array([True] * 40 + [False] * 20 + [True] * 100)
    r = compare.mcnemar(a, b)
    assert r["method"].startswith("chi-square")
    assert r["statistic"] == pytest.approx((abs(40 - 20) - 1) ** 2 / 60)
    assert compare.mcnemar(a, a)["p_value"] == 1.0


def test_match_clusters_follows_a_shrunk_cluster():
    base = {0: {"a", "b", "c", "d", "e", "f"}, 1: {"x", "y"}}
    cand = {7: {"e", "f", "g"}, 8: {"z"}}
    shared = {"e", "f", "g"}  # a-d were fixed, x/y fixed, z newly broken
    assert compare.match_clusters(base, cand, shared) == [(0, 7, pytest.approx(2 / 3))]
    assert compare.match_clusters(base, cand, shared, min_overlap=0.9) == []
    with pytest.raises(ParameterError):
        compare.match_clusters(base, cand, shared, min_overlap=0)


# -- the report -----------------------------------------------------------------------------------------------------


def test_compare_counts_fixed_broken_and_still_failing(pair):
    base, cand = pair
    report = stages.compare_runs(base, [cand], n_resamples=300)
    comp = report.doc["comparisons"][0]
    assert comp["counts"] == {"fixed": 20, "broken": 5, "still_failing": 10, "still_correct": 85,
                              "still_failing_other_pred": 5}
    assert comp["mcnemar"]["fixed"] == 20 and comp["mcnemar"]["broken"] == 5
    assert comp["mcnemar"]["method"] == "chi-square with continuity correction"
    acc = comp["overall"]["accuracy"]
    assert acc["base"] == pytest.approx(90 / 120) and acc["candidate"] == pytest.approx(105 / 120)
    assert acc["delta"] == pytest.approx(15 / 120) and acc["ci"][0] <= acc["delta"] <= acc["ci"][1]
    assert acc["significant"] is True
    assert [r["label"] for r in comp["per_class"]] == LABELS
    assert {e["example_id"] for e in comp["examples"]["broken"]} == {f"ex{i:03d}" for i in range(100, 105)}
    ex = report.examples.set_index("example_id")
    assert ex.loc["ex000", "status"] == "fixed" and ex.loc["ex027", "status"] == "still_failing"
    assert ex.loc["ex000", "base_cluster"] == 0 and ex.loc["ex101", "candidate_cluster"] == 6
    assert comp["error_types"] is None  # no labels database next to the runs


def test_compare_reports_clusters_that_vanished_appeared_or_persisted(pair):
    base, cand = pair
    cl = stages.compare_runs(base, [cand], n_resamples=50).doc["comparisons"][0]["clusters"]
    assert cl["available"]
    assert [(r["base_id"], r["candidate_id"]) for r in cl["persisted"]] == [(1, 5)]
    assert [(r["cluster_id"], r["share_fixed"]) for r in cl["vanished"]] == [(0, 1.0)]
    assert [(r["cluster_id"], r["share_broken"]) for r in cl["appeared"]] == [(6, 1.0)]


def test_error_types_before_and_after_come_from_the_labels_store(pair):
    base, cand = pair
    store = LabelStore(base.parent / "labels.sqlite", user="alice")
    store.create_error_type("Sport jargon", severity="high")
    store.assign("base", [f"ex{i:03d}" for i in range(25)], "Sport jargon")  # 20 get fixed, 5 still fail
    report = stages.compare_runs(base, [cand], n_resamples=50)
    types = report.doc["comparisons"][0]["error_types"]
    assert types == [{"name": "Sport jargon", "severity": "high", "base": 25, "fixed": 20, "still_failing": 5,
                      "candidate": None, "candidate_suggested": None, "delta": None}]
    assert "has no labels yet" in compare_markdown.to_markdown(report.doc)
    store.assign("cand", ["ex020", "ex021"], "Sport jargon")
    store.assign("cand", ["ex100"], "Sport jargon", source="suggested")
    types = stages.compare_runs(base, [cand], n_resamples=50).doc["comparisons"][0]["error_types"]
    assert (types[0]["candidate"], types[0]["candidate_suggested"], types[0]["delta"]) == (2, 1, -22)


def test_write_report_writes_json_markdown_and_examples(pair, tmp_path):
    base, cand = pair
    report = stages.compare_runs(base, [cand], n_resamples=50)
    paths = stages.write_report(report, tmp_path / "out")
    assert [p.name for p in paths] == list(compare.REPORT_FILES)
    doc = json.loads(paths[0].read_text(encoding="utf-8"))
    assert doc["format"] == compare.FORMAT and doc["schema_version"] == 1 and doc["baseline"] == "base"
    md = paths[1].read_text(encoding="utf-8")
    assert "<b>" not in md and "&lt;b&gt;" in md and "tech &lt;b&gt;read&lt;/b&gt; \\| business" in md
    assert len(pd.read_parquet(paths[2])) == 120
    assert not list((tmp_path / "out").glob(".*tmp"))


def test_write_report_refuses_a_file_or_a_run_directory(pair, tmp_path):
    base, cand = pair
    report = stages.compare_runs(base, [cand], n_resamples=20)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="not a folder"):
        stages.write_report(report, tmp_path / "file")
    with pytest.raises(UserError, match="is a run directory"):
        stages.write_report(report, base)
    assert not (base / "compare.json").exists()


def test_runs_over_other_example_ids_are_refused_naming_how_many(tmp_path):
    df = eval_frame(50)
    other = df.copy()
    other.loc[:6, "example_id"] = [f"new{i}" for i in range(7)]
    a = write_run(tmp_path / "a", df).path
    b = write_run(tmp_path / "b", other).path
    with pytest.raises(DataError) as err:
        stages.compare_runs(a, [b])
    message = str(err.value)
    assert "7 of the base's 50 example ids are missing" in message and "7 of its 50 are not in the base" in message
    assert "\n" not in message


def test_same_ids_with_other_texts_or_labels_are_refused(tmp_path):
    df = eval_frame(30)
    a = write_run(tmp_path / "a", df).path
    texts = df.copy()
    texts.loc[3, "text"] = "something else"
    b = write_run(tmp_path / "b", texts).path
    with pytest.raises(DataError, match="1 examples have the same id .* but another text"):
        stages.compare_runs(a, [b])
    gold = df.copy()
    gold.loc[[1, 2], "label"] = [wrong(x) for x in gold.loc[[1, 2], "label"]]
    c = write_run(tmp_path / "c", gold).path
    with pytest.raises(DataError, match="2 examples have another gold label"):
        stages.compare_runs(a, [c])


def test_other_data_hash_with_identical_examples_is_a_note(tmp_path):
    df = eval_frame(30)
    a = write_run(tmp_path / "a", df, sha="aaaa").path
    b = write_run(tmp_path / "b", df, sha="bbbb").path
    comp = stages.compare_runs(a, [b], n_resamples=20).doc["comparisons"][0]
    assert any("sha256" in n for n in comp["notes"])
    assert comp["overall"]["accuracy"]["delta"] == 0


def test_a_run_given_twice_is_refused(pair):
    base, cand = pair
    with pytest.raises(UserError, match="given twice"):
        stages.compare_runs(base, [cand, base])
    with pytest.raises(UserError, match="needs a candidate"):
        stages.compare_runs(base, [])


# -- ablation series ------------------------------------------------------------------------------------------------


def test_ablation_series_has_one_column_per_run_with_the_baseline_marked(pair, tmp_path):
    base, cand = pair
    df = pd.read_parquet(base / rundir.PREDICTIONS)[["example_id", "text", "label", "pred"]]
    df.loc[:9, "pred"] = df.loc[:9, "label"]  # fixes 10
    third = write_run(tmp_path / "third", df).path
    report = stages.compare_runs(base, [cand, third], n_resamples=50)
    s = report.doc["series"]
    assert s["runs"] == ["base", "cand", "third"] and s["baseline"] == "base"
    frame = compare.series_frame(report.doc)
    assert list(frame.columns) == ["section", "name", "base (baseline)", "cand", "third"]
    fixed = frame[(frame["section"] == "examples") & (frame["name"] == "fixed")].iloc[0]
    assert (fixed["cand"], fixed["third"]) == ("20", "10")
    acc = frame[frame["name"] == "accuracy"].iloc[0]
    assert acc["base (baseline)"] == "75.0%" and acc["cand"].startswith("87.5% (+12.5 [")
    assert set(frame["section"]) == {"overall", "class", "examples"}
    md = compare_markdown.to_markdown(report.doc)
    assert "## Ablation series" in md and "base (baseline)" in md


# -- the command ----------------------------------------------------------------------------------------------------


def test_cli_compare_prints_and_writes_the_report(pair, tmp_path):
    base, cand = pair
    result = CliRunner().invoke(app, ["compare", str(base), str(cand), "--out", str(tmp_path / "rep"),
                                      "--resamples", "100"])
    assert result.exit_code == 0, result.output
    assert "20 fixed, 5 broken" in result.output and "wrote" in result.output
    assert (tmp_path / "rep" / "compare.md").is_file()
    result = CliRunner().invoke(app, ["compare", str(base), str(cand), str(base), "--resamples", "10"])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "given twice" in result.output


def test_cli_compare_json_and_ablation(pair, tmp_path):
    base, cand = pair
    result = CliRunner().invoke(app, ["compare", str(base), str(cand), "--json", "--resamples", "20"])
    assert result.exit_code == 0
    assert json.loads(result.output)["comparisons"][0]["counts"]["fixed"] == 20
    result = CliRunner().invoke(app, ["compare", str(base), str(cand), str(cand.parent / "cand"), "--resamples", "5"])
    assert result.exit_code == 2  # the same run twice
    df = pd.read_parquet(base / rundir.PREDICTIONS)[["example_id", "text", "label", "pred"]]
    third = write_run(tmp_path / "third", df).path
    result = CliRunner().invoke(app, ["compare", str(base), str(cand), str(third), "--resamples", "20"],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "Ablation series" in result.output and "base (baseline)" in result.output


def test_cli_compare_bad_input_is_one_line_and_writes_nothing(tmp_path):
    df = eval_frame(20)
    a = write_run(tmp_path / "a", df).path
    other = df.copy()
    other["example_id"] = [f"z{i}" for i in range(20)]
    b = write_run(tmp_path / "b", other).path
    result = CliRunner().invoke(app, ["compare", str(a), str(b), "--out", str(tmp_path / "rep")])
    assert result.exit_code == 2 and result.output.startswith("error: ") and result.output.count("\n") == 1
    assert "20 of the base's 20 example ids are missing" in result.output
    assert not (tmp_path / "rep").exists()
    result = CliRunner().invoke(app, ["compare", str(a), str(tmp_path / "nope")])
    assert result.exit_code == 2 and "no such run directory" in result.output
