"""`compare --fail-on-regression`: what counts as significantly worse, and the exit code a CI step sees."""

from __future__ import annotations

import numpy as np
import pytest
from test_compare import LABELS, eval_frame, write_run
from typer.testing import CliRunner

from erroranalysis import compare, stages
from erroranalysis.cli.app import app
from erroranalysis.cli.compare import REGRESSION_EXIT
from erroranalysis.labels import LabelStore

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def runs(tmp_path, *, broken: int, fixed: int = 0, label: str | None = None, cluster: bool = False):
    """base fails on ex000-ex019; the candidate fixes `fixed` of them and breaks `broken` others (of class `label`
    when given), clustered together when `cluster`."""
    df = eval_frame(n=240)
    base, cand = df.copy(), df.copy()
    first = [f"ex{i:03d}" for i in range(20)]
    base.loc[:19, "pred"] = [LABELS[(LABELS.index(x) + 1) % 3] for x in base.loc[:19, "label"]]
    cand.loc[fixed:19, "pred"] = base.loc[fixed:19, "pred"]
    pool = df.index[20:] if label is None else df.index[20:][df.loc[20:, "label"] == label]
    chosen = list(pool[:broken])
    cand.loc[chosen, "pred"] = [LABELS[(LABELS.index(x) + 1) % 3] for x in cand.loc[chosen, "label"]]
    base_clusters = {e: 0 for e in first} if cluster else None
    cand_clusters = ({e: 0 for e in first[fixed:]} | {f"ex{i:03d}": 0 for i in chosen}) if cluster else None
    b = write_run(tmp_path / "base", base, clusters=base_clusters, cluster_names={0: "sport read as tech"})
    c = write_run(tmp_path / "cand", cand, clusters=cand_clusters, cluster_names={0: "sport read as tech"})
    return b.path, c.path


def test_a_significant_drop_of_a_class_f1_fails_the_gate(tmp_path):
    base, cand = runs(tmp_path, broken=25, label="sport")
    comp = stages.compare_runs(base, [cand], n_resamples=300).doc["comparisons"][0]
    found = compare.regressions(comp)
    kinds = {(r["kind"], r["name"]) for r in found}
    assert ("class", "sport") in kinds and ("overall", "accuracy") in kinds
    sport = next(r for r in found if r["name"] == "sport")
    assert sport["delta"] < 0 and sport["ci"][1] < 0 and sport["text"].startswith("F1 of class 'sport' fell from")
    result = invoke("compare", base, cand, "--fail-on-regression", "--resamples", "300")
    assert result.exit_code == REGRESSION_EXIT == 3, result.output
    assert "Regressions of cand against base" in result.output and "F1 of class 'sport' fell" in result.output
    assert result.stderr.strip().splitlines()[-1].startswith("regression: ") and "exit 3" in result.stderr


def test_an_improvement_or_noise_passes(tmp_path):
    base, cand = runs(tmp_path / "a", broken=2, fixed=15)
    result = invoke("compare", base, cand, "--fail-on-regression", "--resamples", "300")
    assert result.exit_code == 0, result.output
    assert "No significant regression of cand against base" in result.output
    base, cand = runs(tmp_path / "b", broken=2, fixed=0)  # 2 breaks: not significant
    assert invoke("compare", base, cand, "--fail-on-regression", "--resamples", "300").exit_code == 0
    assert invoke("compare", base, cand, "--resamples", "300").exit_code == 0  # no gate asked: never 3


def test_a_cluster_that_grows_with_newly_failing_examples_is_a_regression(tmp_path):
    base, cand = runs(tmp_path, broken=12, fixed=2, cluster=True)
    comp = stages.compare_runs(base, [cand], n_resamples=200).doc["comparisons"][0]
    grown = [r for r in compare.regressions(comp) if r["kind"] == "cluster"]
    assert len(grown) == 1
    r = grown[0]
    assert (r["base"], r["candidate"], r["broken"], r["fixed"]) == (20, 30, 12, 2)
    assert r["p_value"] == pytest.approx(compare.worse_p(12, 2)) and r["p_value"] < 0.05
    assert "grew from 20 to 30 failures: 12 newly failing, 2 fixed" in r["text"]
    # the same growth is not significant at a stricter level
    assert not [r for r in compare.regressions(comp, alpha=0.001) if r["kind"] == "cluster"]


def test_labeled_error_types_are_gated_by_newly_failing_against_fixed(tmp_path):
    base, cand = runs(tmp_path, broken=10, fixed=0)
    store = LabelStore(tmp_path / "labels.sqlite", user="alice")
    store.create_error_type("Sport jargon")
    store.assign("base", [f"ex{i:03d}" for i in range(20)], "Sport jargon")
    broken = [e for e, ok in zip(*_correct(cand)) if not ok and int(e[2:]) >= 20]
    store.assign("cand", [f"ex{i:03d}" for i in range(20)] + broken, "Sport jargon", source="suggested")
    comp = stages.compare_runs(base, [cand], n_resamples=200).doc["comparisons"][0]
    typed = [r for r in compare.regressions(comp) if r["kind"] == "error_type"]
    assert [(r["name"], r["base"], r["candidate"], r["broken"], r["fixed"]) for r in typed] == [
        ("Sport jargon", 20, 30, 10, 0)]


def _correct(path):
    from erroranalysis.rundir import Run

    p = Run.open(path).predictions()
    return p["example_id"].tolist(), p["correct"].tolist()


def test_worse_p_is_one_sided():
    assert compare.worse_p(0, 0) == 1.0
    assert compare.worse_p(6, 0) == pytest.approx(0.5 ** 6)
    assert compare.worse_p(0, 6) == 1.0
    assert compare.worse_p(10, 10) > 0.5


@pytest.mark.parametrize("alpha", ["0", "1", "x"])
def test_bad_alpha_is_one_line(tmp_path, alpha):
    base, cand = runs(tmp_path, broken=1)
    result = invoke("compare", base, cand, "--fail-on-regression", "--alpha", alpha)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


def test_significance_matches_the_report_interval(tmp_path):
    """The gate reads the report's own intervals: a class is a regression exactly when its interval is below 0."""
    base, cand = runs(tmp_path, broken=25, label="tech")
    comp = stages.compare_runs(base, [cand], n_resamples=300).doc["comparisons"][0]
    gated = {r["name"] for r in compare.regressions(comp) if r["kind"] == "class"}
    assert gated == {r["label"] for r in comp["per_class"] if r["f1"]["ci"][1] < 0}
    assert np.all([r["f1"]["delta"] < 0 for r in comp["per_class"] if r["label"] in gated])
