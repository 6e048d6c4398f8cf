import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fake_runs import commit, inferred_run

from erroranalysis import rundir
from erroranalysis.core.errors import DataError, ParameterError, RunError
from erroranalysis.rundir import create_run
from erroranalysis.stages.cluster import cluster_run
from erroranalysis.stages.cluster_names import name_run

LABELS = ["business", "sport", "culture"]
WORDS = {"business": ["market", "shares", "profit", "bank", "economy"],
         "sport": ["match", "goal", "team", "coach", "league"],
         "culture": ["film", "actor", "award", "music", "album"]}
PLANTED = {"oil": ("business", "sport", ["oil", "barrel", "crude", "opec"]),
           "tennis": ("sport", "culture", ["tennis", "racket", "serve", "wimbledon"])}


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch):
    from erroranalysis.cluster import numba_cache_dir

    monkeypatch.setenv("NUMBA_CACHE_DIR", os.environ.get("NUMBA_CACHE_DIR") or str(numba_cache_dir()))
    monkeypatch.setenv("ERRORANALYSIS_CACHE_DIR", str(tmp_path / "cache"))


def synthetic(n: int = 600, seed: int = 0, d: int = 24):
    """Predictions with two planted failing sub-topics and ~6% background failures, and matching vectors."""
    rng = np.random.default_rng(seed)
    centres = {name: rng.normal(size=d) * 3 for name in [*LABELS, *PLANTED]}
    rows, vectors = [], []
    for i in range(n):
        label = LABELS[i % 3]
        sub = next((s for s, (lab, _, _) in PLANTED.items() if lab == label and rng.random() < 0.25), None)
        words = list(rng.choice(WORDS[label], 5)) + (list(rng.choice(PLANTED[sub][2], 3)) if sub else [])
        if sub and rng.random() < 0.9:
            pred = PLANTED[sub][1]
        elif rng.random() < 0.06:
            pred = str(rng.choice([l for l in LABELS if l != label]))
        else:
            pred = label
        rows.append({"example_id": f"ex{i:04d}", "text": " ".join(words) + f" story {i}", "label": label,
                     "pred": pred, "correct": pred == label, "confidence": 0.7, "loss": 0.4,
                     "n_tokens": len(words) + 2, "truncated": False, "planted": sub or ""})
        vectors.append(centres[sub or label] + rng.normal(size=d))
    return pd.DataFrame(rows), np.array(vectors, dtype=np.float32)


def make_run(path: Path, frame=None, vectors=None, *, hidden: bool = True, stage: str = "infer") -> rundir.Run:
    if frame is None:
        frame, vectors = synthetic()
    return inferred_run(path, frame, labels=LABELS, hidden=vectors if hidden else None, stage=stage)


FAST = dict(embedder="hidden", reducer="pca", layout="pca")


def best_f1(truth, labels, group) -> float:
    g = truth == group
    best = 0.0
    for c in set(labels[labels >= 0].tolist()):
        m = labels == c
        inter = (g & m).sum()
        if inter:
            best = max(best, 2 * inter / (g.sum() + m.sum()))
    return best


def snapshot(run: rundir.Run) -> dict:
    files = [rundir.EMBEDDINGS, rundir.EMBEDDINGS_META, rundir.CLUSTERS, rundir.ASSIGNMENTS]
    out = {name: run.file(name).read_bytes() for name in files if run.has(name)}
    out["stage"] = json.dumps(run.manifest["stages"].get("cluster"), sort_keys=True)
    return out


def test_writes_all_artifacts(tmp_path):
    run = make_run(tmp_path / "run")
    summary = cluster_run(run.path, **FAST)
    predictions = run.predictions()
    failures = predictions[~predictions["correct"]]
    assert summary["n_failures"] == len(failures) and summary["n_examples"] == len(predictions)
    assert summary["method"] == "hdbscan" and summary["n_clusters"] >= 2

    vectors = np.load(run.file(rundir.EMBEDDINGS))
    meta = json.loads(run.file(rundir.EMBEDDINGS_META).read_text())
    assert vectors.shape == (len(failures), 24) and vectors.dtype == np.float32
    assert meta["example_ids"] == failures["example_id"].tolist()
    assert meta["rows"] == len(failures) and meta["dim"] == 24 and meta["embedder"]["name"] == "hidden"

    assignments = pd.read_parquet(run.file(rundir.ASSIGNMENTS))
    assert list(assignments.columns) == ["example_id", "cluster_id", "failure", "membership", "reassigned", "tier",
                                         "local_error_rate", "x", "y"]
    assert assignments["example_id"].tolist() == predictions["example_id"].tolist()
    assert (assignments["failure"] == ~predictions["correct"]).all()
    assert (assignments.loc[~assignments["failure"], "cluster_id"] == -1).all()
    assert np.isfinite(assignments[["x", "y"]].to_numpy()).all()

    clusters = pd.read_parquet(run.file(rundir.CLUSTERS))
    assert clusters["cluster_id"].tolist() == list(range(len(clusters)))
    assert clusters["size"].is_monotonic_decreasing
    counts = assignments[assignments["cluster_id"] >= 0].groupby("cluster_id").size()
    assert counts.to_dict() == dict(zip(clusters["cluster_id"], clusters["size"]))

    stage = run.manifest["stages"]["cluster"]
    assert stage["status"] == "done" and stage["params"]["seed"] == 0 and stage["params"]["reducer"] == "pca"
    assert stage["n_clusters"] == summary["n_clusters"] and stage["resolved"]["min_cluster_size"] >= 5


def test_planted_groups_recovered_and_named(tmp_path):
    frame, vectors = synthetic(seed=1)
    run = make_run(tmp_path / "run", frame, vectors)
    cluster_run(run.path, **FAST)
    assignments = pd.read_parquet(run.file(rundir.ASSIGNMENTS))
    clusters = pd.read_parquet(run.file(rundir.CLUSTERS)).set_index("cluster_id")
    fail = assignments["failure"].to_numpy()
    truth = frame["planted"].to_numpy()[fail]
    labels = assignments["cluster_id"].to_numpy()[fail]
    for group, (gold, pred, words) in PLANTED.items():
        assert best_f1(truth, labels, group) > 0.85
        members = labels[truth == group]
        top = np.bincount(members[members >= 0]).argmax()
        name = clusters.loc[top, "name"]
        assert name.startswith(f"{gold} -> {pred}: ")
        assert any(w in name for w in words)
        assert clusters.loc[top, "kind"] == "systematic"


def test_recluster_with_other_settings_replaces_results(tmp_path):
    run = make_run(tmp_path / "run")
    cluster_run(run.path, **FAST)
    first = pd.read_parquet(run.file(rundir.ASSIGNMENTS))
    cluster_run(run.path, embedder="hidden", reducer="none", layout="none", min_cluster_size=40, error_aware=False,
                assign_noise=None, seed=5)
    second = pd.read_parquet(run.file(rundir.ASSIGNMENTS))
    assert len(first) == len(second)
    assert second["x"].isna().all()
    assert set(second["tier"][second["failure"]]) == {"all"}
    stage = run.manifest["stages"]["cluster"]
    assert stage["params"]["min_cluster_size"] == 40 and stage["params"]["seed"] == 5


def test_precomputed_file_embedder(tmp_path):
    frame, vectors = synthetic()
    run = make_run(tmp_path / "run", frame, vectors, hidden=False)
    file = tmp_path / "vecs.npy"
    np.save(file, vectors)
    summary = cluster_run(run.path, embedder=str(file), reducer="pca", layout="pca")
    assert summary["embedder"] == "file"
    # vectors for the failures only, rows named by a sidecar (the format of a run's own embeddings.json)
    other = make_run(tmp_path / "other", frame, vectors, hidden=False)
    summary2 = cluster_run(other.path, embedder=str(run.file(rundir.EMBEDDINGS)), reducer="pca", layout="pca")
    assert summary2["n_failures"] == summary["n_failures"]
    assignments = pd.read_parquet(other.file(rundir.ASSIGNMENTS))
    assert assignments.loc[~assignments["failure"], "x"].isna().all()  # no vectors for the correct examples
    assert set(assignments["tier"][assignments["failure"]]) == {"all"}


def test_no_failures(tmp_path):
    frame, vectors = synthetic(n=60)
    frame["pred"] = frame["label"]
    frame["correct"] = True
    run = make_run(tmp_path / "run", frame, vectors)
    summary = cluster_run(run.path, **FAST)
    assert summary["n_failures"] == 0 and summary["n_clusters"] == 0 and summary["method"] == "empty"
    assert len(pd.read_parquet(run.file(rundir.CLUSTERS))) == 0
    assignments = pd.read_parquet(run.file(rundir.ASSIGNMENTS))
    assert len(assignments) == 60 and (assignments["cluster_id"] == -1).all()
    assert np.load(run.file(rundir.EMBEDDINGS)).shape[0] == 0
    assert run.stage_status("cluster") == "done"


def test_handful_of_failures_grouped_by_pair(tmp_path):
    frame, vectors = synthetic(n=90)
    keep_fail = frame.index[~frame["correct"]][:7]
    frame.loc[~frame.index.isin(keep_fail), "pred"] = frame["label"]
    frame["correct"] = frame["pred"] == frame["label"]
    run = make_run(tmp_path / "run", frame, vectors)
    summary = cluster_run(run.path, **FAST)
    assert summary["method"] == "confusion_pairs" and "grouped by confusion pair" in summary["note"]
    clusters = pd.read_parquet(run.file(rundir.CLUSTERS))
    assert all(len(c) == 1 for c in clusters["top_confusions"])
    assert clusters["size"].sum() == 7


def test_name_run_renames_without_reclustering(tmp_path):
    run = make_run(tmp_path / "run")
    cluster_run(run.path, **FAST)
    before = run.file(rundir.ASSIGNMENTS).read_bytes()
    clusters_before = pd.read_parquet(run.file(rundir.CLUSTERS))
    summary = name_run(run.path, n_keywords=2, n_exemplars=1)
    after = pd.read_parquet(run.file(rundir.CLUSTERS))
    assert run.file(rundir.ASSIGNMENTS).read_bytes() == before
    assert after["cluster_id"].tolist() == clusters_before["cluster_id"].tolist()
    assert after["size"].tolist() == clusters_before["size"].tolist()
    assert all(len(k) <= 2 for k in after["keywords"]) and all(len(e) == 1 for e in after["exemplar_ids"])
    assert after["kind"].tolist() == clusters_before["kind"].tolist()
    assert summary["n_clusters"] == len(after)
    assert run.stage_status("cluster_names") == "done"


def test_name_run_needs_clustering(tmp_path):
    run = make_run(tmp_path / "run")
    with pytest.raises(RunError, match="stage 'cluster' was not run"):
        name_run(run.path)


@pytest.mark.parametrize("change, error, message", [
    (dict(embedder="missing.npy"), DataError, "no such embeddings file"),
    (dict(embedder="wrong_shape.npy"), DataError, "rows but the run has"),
    (dict(min_cluster_size=1), ParameterError, "^min_cluster_size=1 is invalid"),
    (dict(reducer="tsne"), ParameterError, "^reducer="),
    (dict(layout="tsne"), ParameterError, "^layout="),
    (dict(assign_noise=2.0), ParameterError, "^assign_noise="),
    (dict(pair_weight=-1), ParameterError, "^pair_weight="),
    (dict(seed=-3), ParameterError, "^seed="),
    (dict(embedder="sbert"), ParameterError, "expected auto, static, minilm, hidden or a local model folder"),
])
def test_bad_input_leaves_previous_clustering(tmp_path, change, error, message):
    run = make_run(tmp_path / "run")
    cluster_run(run.path, **FAST)
    before = snapshot(run)
    np.save(run.path / "wrong_shape.npy", np.zeros((3, 24), np.float32))
    params = dict(FAST)
    params.update(change)
    if str(params["embedder"]).endswith(".npy"):
        params["embedder"] = str(run.path / params["embedder"])
    with pytest.raises(error, match=message):
        cluster_run(run.path, **params)
    assert snapshot(run) == before


def test_hidden_states_missing(tmp_path):
    frame, vectors = synthetic(n=60)
    run = make_run(tmp_path / "run", frame, vectors, hidden=False)
    with pytest.raises(RunError, match="no hidden_states.npy"):
        cluster_run(run.path, **FAST)
    assert not run.has(rundir.CLUSTERS) and "cluster" not in run.manifest["stages"]


def test_run_without_predictions(tmp_path):
    with pytest.raises(RunError, match="no such run directory"):
        cluster_run(tmp_path / "nope", **FAST)
    with create_run(tmp_path / "empty", task="classification", labels=LABELS) as run:
        pass
    with pytest.raises(RunError, match="stage 'infer' was not run"):
        cluster_run(run.path, **FAST)
    with run.stage("infer"):
        pass
    with pytest.raises(RunError, match="stage 'infer' wrote no predictions.parquet"):
        cluster_run(run.path, **FAST)


def test_predictions_without_required_columns(tmp_path):
    frame, vectors = synthetic(n=60)
    run = make_run(tmp_path / "run", frame.drop(columns=["pred"]), vectors)
    with pytest.raises(RunError, match="missing column\\(s\\) 'pred'"):
        cluster_run(run.path, **FAST)
    frame2 = frame.copy()
    frame2.loc[3, "example_id"] = frame2.loc[4, "example_id"]
    run2 = make_run(tmp_path / "run2", frame2, vectors)
    with pytest.raises(RunError, match="duplicate ids 'ex0004'"):
        cluster_run(run2.path, **FAST)


def test_analyze_runs_are_accepted(tmp_path):
    frame, vectors = synthetic(n=120)
    run = make_run(tmp_path / "run", frame, stage="load_predictions")  # 'analyze' keeps no hidden states
    np.save(tmp_path / "vectors.npy", vectors)
    summary = cluster_run(run.path, **{**FAST, "embedder": str(tmp_path / "vectors.npy")})
    assert summary["n_failures"] == int((~frame["correct"]).sum())


def test_progress_reports_phases(tmp_path):
    run = make_run(tmp_path / "run")
    phases = []
    cluster_run(run.path, progress=lambda phase, done, total: phases.append(phase), **FAST)
    assert {"embed", "cluster", "layout"} <= set(phases)


def test_pair_weight_and_injected_features(tmp_path):
    class Constant:
        name = "constant"
        weight = 1.0

        def transform(self, frame):
            return np.ones((len(frame), 1), np.float32)

    run = make_run(tmp_path / "run")
    summary = cluster_run(run.path, pair_weight=0.5, features=[Constant()], **FAST)
    assert summary["n_clusters"] >= 2
    assert run.manifest["stages"]["cluster"]["params"]["features"] == ["constant", "confusion_pair"]


def test_tiny_checkpoint_run_with_hidden_states(tiny_run, tmp_path):
    import shutil

    path = tmp_path / "run"
    shutil.copytree(tiny_run, path)
    summary = cluster_run(path, **FAST)
    assert summary["n_examples"] == 60
    assert pd.read_parquet(path / rundir.ASSIGNMENTS)["example_id"].tolist() == \
        pd.read_parquet(path / rundir.PREDICTIONS)["example_id"].tolist()


# -- CLI --------------------------------------------------------------------------------------------------------


def cli(*args):
    from typer.testing import CliRunner

    from erroranalysis.cli.app import app

    return CliRunner().invoke(app, list(args))


def test_cli_clusters_and_prints_table(tmp_path):
    run = make_run(tmp_path / "run")
    result = cli("cluster", str(run.path), "--embedder", "hidden", "--reducer", "pca", "--layout", "pca")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "failures of 600 examples" in text and "Error clusters" in text
    result = cli("cluster", str(run.path), "--names-only", "--keywords", "3")
    assert result.exit_code == 0, result.output
    result = cli("cluster", str(run.path), "--embedder", "hidden", "--reducer", "none", "--layout", "none", "--json",
                 "--keep-noise", "--no-slice-groups")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["n_examples"] == 600
    assert run.manifest["stages"]["cluster"]["params"]["slice_groups"] is False


def test_cli_bad_input_exits_2_with_one_line(tmp_path):
    run = make_run(tmp_path / "run")
    result = cli("cluster", str(run.path), "--embedder", "hidden", "--min-cluster-size", "1")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: --min-cluster-size 1 is invalid: expected an integer >= 2."]
    result = cli("cluster", str(run.path), "--group-purity", "1.5")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == ["error: --group-purity 1.5 is invalid: expected a number in [0, 1]."]
    result = cli("cluster", str(tmp_path / "nope"))
    assert result.exit_code == 2 and result.output.startswith("error: ")
    result = cli("cluster", str(run.path), "--embedder", str(tmp_path / "missing.npy"))
    assert result.exit_code == 2 and "no such embeddings file" in result.output
    assert not run.has(rundir.CLUSTERS)


def test_cli_help_loads_no_model_library():
    """`cluster --help` loads the command (its options come from the library's declarations), but none of the
    libraries that compute: UMAP, HDBSCAN, torch, scikit-learn, transformers load only when a stage runs."""
    code = ("import sys; from typer.testing import CliRunner; from erroranalysis.cli.app import app; "
            "r = CliRunner().invoke(app, ['cluster', '--help']); assert r.exit_code == 0, r.output; "
            "assert '--min-cluster-size' in r.output; "
            "print([m for m in ('umap', 'hdbscan', 'torch', 'sklearn', 'transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "COLUMNS": "200"}).stdout
    assert out.strip() == "[]"


# -- the real thing: packaged model + UMAP ------------------------------------------------------------------------


SUBJECTS = {
    "business": ["The bank", "The retailer", "The carmaker", "Investors", "The airline", "The insurer"],
    "sport": ["The striker", "The football club", "The goalkeeper", "The rugby side", "The coach", "The captain"],
    "culture": ["The film", "The band", "The actor", "The novelist", "The singer", "The director"],
    "oil": ["Oil prices", "Crude oil", "Brent crude", "OPEC ministers", "Petrol prices", "Oil futures"],
    "tennis": ["The tennis champion", "The top seed at Wimbledon", "The tennis finalist", "The young tennis player",
               "The world number one in tennis", "The doubles pair"],
}
EVENTS = {
    "business": ["reported higher quarterly profit", "cut its sales forecast", "saw its shares fall sharply",
                 "announced a merger with a rival", "raised its dividend", "laid off staff to save costs"],
    "sport": ["scored twice in the league match", "won the cup final", "saved a late penalty",
              "was sent off in the derby", "signed a new contract", "lost the semi-final"],
    "culture": ["won best picture at the awards", "released a new album", "starred in a new drama",
                "topped the bestseller list", "announced a world tour", "premiered at the festival"],
    "oil": ["jumped after a cut in production", "fell on weak demand", "hit a record per barrel",
            "slid as stockpiles grew", "rose after refinery outages", "agreed to cut output"],
    "tennis": ["won in straight sets", "served twenty aces", "lost a long tie-break", "withdrew with a wrist injury",
               "reached the semi-final of the open", "saved three match points"],
}


def topic_texts(n: int = 300, seed: int = 0) -> pd.DataFrame:
    """Short news-like sentences; business texts about oil and sport texts about tennis fail."""
    rng = np.random.default_rng(seed)
    sub_of = {"business": "oil", "sport": "tennis"}
    target = {"business": "sport", "sport": "culture"}
    rows = []
    for i in range(n):
        label = LABELS[i % 3]
        sub = sub_of.get(label) if label in sub_of and rng.random() < 0.3 else None
        topic = sub or label
        text = f"{rng.choice(SUBJECTS[topic])} {rng.choice(EVENTS[topic])}, reports said on day {i}."
        if sub and rng.random() < 0.9:
            pred = target[label]
        elif rng.random() < 0.06:
            pred = str(rng.choice([l for l in LABELS if l != label]))
        else:
            pred = label
        rows.append({"example_id": f"t{i}", "text": text, "label": label, "pred": pred, "correct": pred == label,
                     "confidence": 0.6, "loss": 0.5, "n_tokens": len(text.split()), "truncated": False,
                     "planted": sub or ""})
    return pd.DataFrame(rows)


@pytest.mark.slow
def test_minilm_umap_end_to_end_and_cache(tmp_path, monkeypatch):
    frame = topic_texts()
    run = make_run(tmp_path / "run", frame, None, hidden=False)
    summary = cluster_run(run.path, seed=0)
    assert summary["embedder"] == "minilm"
    assignments = pd.read_parquet(run.file(rundir.ASSIGNMENTS))
    fail = assignments["failure"].to_numpy()
    truth = frame["planted"].to_numpy()[fail]
    labels = assignments["cluster_id"].to_numpy()[fail]
    for group in ("oil", "tennis"):
        assert best_f1(truth, labels, group) > 0.8
    assert np.isfinite(assignments[["x", "y"]].to_numpy()).all()
    assert np.allclose(np.linalg.norm(np.load(run.file(rundir.EMBEDDINGS)), axis=1), 1, atol=1e-4)

    # re-clustering never re-embeds: the cache answers every text
    from erroranalysis.embed.models import MiniLMEmbedder

    def refuse(self, *args, **kwargs):
        raise AssertionError("re-embedded a cached text")

    monkeypatch.setattr(MiniLMEmbedder, "_encode", refuse)
    again = cluster_run(run.path, seed=0, min_cluster_size=6)
    assert again["n_failures"] == summary["n_failures"]


def test_name_run_keeps_other_stages_columns(tmp_path):
    run = make_run(tmp_path / "run")
    cluster_run(run.path, **FAST)
    predictions = run.predictions()
    failing = predictions.loc[~predictions["correct"], "example_id"].tolist()
    commit(run, "slices", slices_parquet=pd.DataFrame({"slice_id": [0], "description": ["all failures"]}),
           slice_members_parquet=pd.DataFrame({"example_id": failing, "slice_id": 0}))
    name_run(run.path)
    clusters = pd.read_parquet(run.file(rundir.CLUSTERS))
    assert all(list(s) == ["all failures (100%)"] for s in clusters["slices"])


def with_concept(frame: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """Every 25th example mentions the weather and fails 90% of the time; its vector stays its topic's."""
    rng = np.random.default_rng(seed)
    frame = frame.copy()
    concept = (np.arange(len(frame)) % 25 == 7) & (frame["planted"] == "")
    fails = concept & (rng.random(len(frame)) < 0.9)
    frame.loc[concept, "text"] = frame.loc[concept, "text"].str.replace(" story ", " weather ")
    wrong = {"business": "sport", "sport": "culture", "culture": "business"}
    frame.loc[fails, "pred"] = frame.loc[fails, "label"].map(wrong)
    frame["correct"] = frame["pred"] == frame["label"]
    frame.loc[fails, "planted"] = "weather"
    return frame


def test_scattered_slice_becomes_its_own_cluster(tmp_path):
    from erroranalysis.stages.slices import slices_run

    frame, vectors = synthetic(n=900, seed=2)
    frame = with_concept(frame)
    run = make_run(tmp_path / "run", frame.drop(columns="planted"), vectors)  # the truth is no metadata
    slices_run(run.path, merge=False)
    slices = pd.read_parquet(run.file(rundir.SLICES))
    weather = int(slices.loc[slices["description"] == 'text contains "weather"', "slice_id"].iloc[0])

    cluster_run(run.path, **FAST, slice_groups=False)
    assignments = pd.read_parquet(run.file(rundir.ASSIGNMENTS))
    fail = assignments["failure"].to_numpy()
    truth = frame["planted"].to_numpy()[fail]
    assert best_f1(truth, assignments["cluster_id"].to_numpy()[fail], "weather") < 0.6  # scattered by topic
    assert pd.read_parquet(run.file(rundir.CLUSTERS))["slice_id"].isna().all()

    summary = cluster_run(run.path, **FAST)
    assignments = pd.read_parquet(run.file(rundir.ASSIGNMENTS))
    clusters = pd.read_parquet(run.file(rundir.CLUSTERS))
    labels = assignments["cluster_id"].to_numpy()[fail]
    row = clusters[clusters["slice_id"].notna()]
    assert len(row) == 1 and int(row["slice_id"].iloc[0]) == weather
    c = int(row["cluster_id"].iloc[0])
    in_slice = set(pd.read_parquet(run.file(rundir.SLICE_MEMBERS)).query("slice_id == @weather")["example_id"])
    ids = assignments["example_id"].to_numpy()[fail]
    assert set(ids[labels == c]) == {i for i in ids if i in in_slice}  # exactly the slice's failures
    assert best_f1(truth, labels, "weather") > 0.95
    assert row["kind"].iloc[0] == "slice" and row["slice"].iloc[0] == 'text contains "weather"'
    assert row["name"].iloc[0].endswith('text contains "weather"')
    assert (assignments.loc[assignments["cluster_id"] == c, "tier"] == "slice").all()
    for group in PLANTED:  # the topic-defined groups are untouched
        assert best_f1(truth, labels, group) > 0.85
    assert run.manifest["stages"]["cluster"]["params"]["slice_groups"] is True
    assert run.manifest["stages"]["cluster"]["resolved"]["groups_taken_out"] == 1
    assert any(s["kind"] == "slice" for s in summary["clusters"])

    name_run(run.path)  # renaming keeps the slice cluster's definition as its name
    again = pd.read_parquet(run.file(rundir.CLUSTERS)).set_index("cluster_id")
    assert again.loc[c, "name"] == row["name"].iloc[0] and again.loc[c, "slice"] == 'text contains "weather"'


def test_slice_groups_without_slices_stage(tmp_path):
    run = make_run(tmp_path / "run")
    summary = cluster_run(run.path, **FAST)  # on by default, nothing to do
    clusters = pd.read_parquet(run.file(rundir.CLUSTERS))
    assert clusters["slice_id"].isna().all() and "slice" not in set(clusters["kind"])
    assert summary["n_clusters"] >= 2


def test_broken_slices_file_is_a_one_line_error(tmp_path):
    run = make_run(tmp_path / "run")
    cluster_run(run.path, **FAST)
    before = snapshot(run)
    commit(run, "slices", slices_parquet=pd.DataFrame({"slice_id": [0], "description": ["x"]}),
           slice_members_parquet=pd.DataFrame({"example_id": ["ex0001"], "slice_id": [0]}))
    with pytest.raises(DataError, match=r"slices\.parquet: missing column\(s\) .*--no-slice-groups"):
        cluster_run(run.path, **FAST)
    after = snapshot(run)
    assert after.pop("stage") != before.pop("stage") and after == before  # stage marked failed, files untouched
    cluster_run(run.path, **FAST, slice_groups=False)


def test_name_run_on_a_clustering_from_before_slice_clusters(tmp_path):
    run = make_run(tmp_path / "run")
    cluster_run(run.path, **FAST)
    old = pd.read_parquet(run.file(rundir.CLUSTERS)).drop(columns=["slice_id", "slice"])
    commit(run, "cluster_names", clusters_parquet=old)
    name_run(run.path)
    clusters = pd.read_parquet(run.file(rundir.CLUSTERS))
    assert clusters["slice_id"].isna().all() and clusters["name"].tolist() == old["name"].tolist()
    run.file(rundir.CLUSTERS).write_bytes(b"not parquet")  # a damaged file is rebuilt, not an error
    name_run(run.path)
    assert pd.read_parquet(run.file(rundir.CLUSTERS))["name"].tolist() == old["name"].tolist()


def test_parents_and_summaries_are_written_and_kept_by_renaming(tmp_path):
    run = make_run(tmp_path / "run")
    cluster_run(run.path, **FAST)
    assert run.manifest["stages"]["cluster"]["params"]["parent_similarity"] == 0.6
    cluster_run(run.path, **FAST, parent_similarity=-1.0)  # every cluster alike enough: parents for sure
    clusters = pd.read_parquet(run.file(rundir.CLUSTERS))
    assert {"summary", "parent_id", "parent_name"} <= set(clusters.columns)
    assert clusters["summary"].map(lambda s: isinstance(s, str) and len(s) > 10).all()
    assert clusters["parent_id"].notna().any() and clusters["parent_name"].notna().any()
    name_run(run.path, n_keywords=3)
    renamed = pd.read_parquet(run.file(rundir.CLUSTERS)).set_index("cluster_id")
    before = clusters.set_index("cluster_id")
    assert renamed["parent_id"].equals(before.loc[renamed.index, "parent_id"])
    cluster_run(run.path, **FAST, parent_similarity=None)
    assert pd.read_parquet(run.file(rundir.CLUSTERS))["parent_id"].isna().all()
