"""The cluster stage under `--engine ray` (a real local Ray): the driver fits a seeded sample of the failures, the
workers place the rest and write assignments per block. A real run made by `stages.analyze` from a predictions file
with three planted failure groups; the embedder is a hashed bag of words (fast, deterministic; MiniLM would only
be slow here), every other part is the real one.

What both engines share above `max_fit`: the sample (`cluster._sample`), the fit on it, the rule that places the
rest, cluster ids by size, membership, tier, local error rate, parents and sizes. What may differ, by design
(docs/scale.md): x, y of the failures (in process the layout covers every failure; under ray the fit sample and
the context, the rest at their nearest fitted failures), and the columns of clusters.parquet other than id, size,
share and parent (under ray they describe the fit sample). Below `max_fit` every artifact is the same."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import shared_ray

from erroranalysis.engines import Engine, blocks
from erroranalysis.rundir import Run, readers
from erroranalysis.sources.table import DataOptions
from erroranalysis.stages import AfterParams
from erroranalysis.stages.analyze import Reading, analyze
from erroranalysis.stages.cluster import ClusterParams, cluster_run

pytest.importorskip("ray")

GROUPS = {  # planted failure groups: (gold, pred, words, size)
    "refund": ("billing", "account", ["refund", "charged", "twice", "invoice", "card", "money"], 160),
    "login": ("account", "shipping", ["password", "login", "locked", "reset", "email", "code"], 150),
    "parcel": ("shipping", "billing", ["parcel", "courier", "late", "tracking", "box", "damaged"], 110),
}
FILLER = ["hello", "thanks", "please", "today", "order", "help", "team", "again", "soon", "week"]
FAST = dict(reducer="pca", layout="pca", seed=3)


class WordsEmbedder:
    """Hashed bag of words: similar texts get similar vectors; module-level so Ray workers unpickle it."""

    key = "test-words"

    def embed(self, frame, progress=None) -> np.ndarray:
        out = np.zeros((len(frame), 256), dtype=np.float32)
        for i, text in enumerate(frame["text"]):
            for word in str(text).lower().split():
                out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % 256] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def planted_predictions(path: Path) -> Path:
    """~1,000 predictions: the planted groups fail (each as its own confusion), the rest is right."""
    rng = np.random.default_rng(0)
    rows = []
    for name, (gold, pred, words, size) in GROUPS.items():
        for _ in range(size):
            text = " ".join([*rng.choice(words, 4, replace=False), *rng.choice(FILLER, 1)])
            rows.append({"text": text, "label": gold, "pred": pred, "group": name})
    everyday = ["price", "plan", "upgrade", "address", "weekend", "store", "colour", "size", "gift", "menu"]
    for _ in range(560):
        label = ["billing", "account", "shipping"][int(rng.integers(3))]
        rows.append({"text": " ".join([*rng.choice(everyday, 3, replace=False), *rng.choice(FILLER, 2)]),
                     "label": label, "pred": label, "group": ""})
    frame = pd.DataFrame(rows).sample(frac=1.0, random_state=1).reset_index(drop=True)
    frame.insert(0, "id", [f"r{i:05d}" for i in range(len(frame))])
    frame.to_parquet(path, index=False)
    return path


@pytest.fixture(scope="module")
def local_ray():
    """The shared local Ray, with this module's classes (the embedders) sent to its workers by value: they cannot
    import a test module."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return shared_ray()


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    """A real run (predictions and metrics) from `analyze`, clustered by nothing yet."""
    folder = tmp_path_factory.mktemp("cluster_blocks")
    data = planted_predictions(folder / "predictions.parquet")
    run = analyze("classification", data, folder / "run", Reading(data=DataOptions(id_column="id")),
                  after=AfterParams(checks=None, slices=None, cluster=None))
    return run.path, pd.read_parquet(data)


def _cluster(source: Path, out: Path, engine=None, **params) -> tuple[Run, dict]:
    shutil.copytree(source, out)
    summary = cluster_run(out, ClusterParams(**FAST, **params), embedder=WordsEmbedder(), engine=engine)
    return Run.open(out), summary


def _found_groups(assignments: pd.DataFrame, data: pd.DataFrame) -> None:
    """Each planted group is mostly one cluster of its own."""
    merged = assignments.merge(data[["id", "group"]], left_on="example_id", right_on="id")
    main = {}
    for name in GROUPS:
        ids = merged.loc[merged["group"] == name, "cluster_id"].to_numpy()
        main[name] = np.bincount(ids[ids >= 0]).argmax()
        assert (ids == main[name]).mean() >= 0.9, name
    assert len(set(main.values())) == len(GROUPS)


def test_ray_places_the_rest_as_in_process(analyzed, local_ray, tmp_path, monkeypatch):
    """`analyze --no-checks --no-slices` of the same file with each engine (the cluster stage gets the engine)."""
    _, data = analyzed
    monkeypatch.setattr(blocks, "ROWS_PER_BLOCK", 128)  # 8 blocks
    data_file = planted_predictions(tmp_path / "predictions.parquet")
    after = AfterParams(checks=None, slices=None, cluster=ClusterParams(**FAST, max_fit=150))
    local, ray_run = (analyze("classification", data_file, tmp_path / name, Reading(data=DataOptions(id_column="id")),
                              after=after, embedder=WordsEmbedder(), engine=engine)
                      for name, engine in (("local", None), ("ray", Engine("ray"))))
    a, b = readers.read_assignments(local), readers.read_assignments(ray_run)
    _found_groups(a, data)
    _found_groups(b, data)
    assert (ray_run.path / "assignments.parquet").is_dir()  # shards, one per block
    # the fitted sample: the rule's, and the one the ray driver fitted
    from erroranalysis.cluster import _sample, default_min_cluster_size

    failures = readers.read_predictions(local).query("~correct").reset_index(drop=True)
    mcs = default_min_cluster_size(len(failures))
    rows = _sample.stratified_sample(_sample.strata_of(failures, len(failures)), failures["example_id"], 150, 3,
                                     floor=2 * mcs)
    fitted_ids = readers.read_embeddings(ray_run)[1]["example_ids"]
    assert fitted_ids == failures["example_id"].iloc[rows].tolist()
    facts = ray_run.manifest["stages"]["cluster"]
    assert facts["engine"]["fit_sample"] == 150 and facts["engine"]["placed_on_workers"] == len(failures) - 150
    # every failure's assignment
    for column in ("example_id", "cluster_id", "failure", "reassigned", "tier"):
        assert a[column].tolist() == b[column].tolist(), column
    np.testing.assert_allclose(a["membership"], b["membership"], rtol=1e-6)
    np.testing.assert_array_equal(a["local_error_rate"].isna(), b["local_error_rate"].isna())
    np.testing.assert_allclose(a["local_error_rate"].fillna(0), b["local_error_rate"].fillna(0), rtol=1e-6)
    assert np.isfinite(b.loc[b["failure"], ["x", "y"]].to_numpy()).all()
    ca, cb = readers.read_clusters(local), readers.read_clusters(ray_run)
    for column in ("cluster_id", "size", "share_of_failures", "parent_id"):
        assert ca[column].tolist() == cb[column].tolist(), column


def test_the_sample_does_not_depend_on_the_blocks(analyzed, local_ray, tmp_path, monkeypatch):
    source, _ = analyzed
    runs = []
    for rows in (100, 333):
        monkeypatch.setattr(blocks, "ROWS_PER_BLOCK", rows)
        runs.append(_cluster(source, tmp_path / f"ray{rows}", Engine("ray"), max_fit=150)[0])
    assert readers.read_embeddings(runs[0])[1]["example_ids"] == readers.read_embeddings(runs[1])[1]["example_ids"]
    pd.testing.assert_frame_equal(readers.read_assignments(runs[0]), readers.read_assignments(runs[1]))


def test_below_max_fit_ray_writes_the_in_process_artifacts(analyzed, local_ray, tmp_path, monkeypatch):
    source, _ = analyzed
    monkeypatch.setattr(blocks, "ROWS_PER_BLOCK", 128)
    local, _ = _cluster(source, tmp_path / "local", max_fit=1000)
    ray_run, _ = _cluster(source, tmp_path / "ray", Engine("ray"), max_fit=1000)
    pd.testing.assert_frame_equal(readers.read_assignments(local), readers.read_assignments(ray_run))
    pd.testing.assert_frame_equal(readers.read_clusters(local), readers.read_clusters(ray_run))
    va, ma = readers.read_embeddings(local)
    vb, mb = readers.read_embeddings(ray_run)
    np.testing.assert_array_equal(va, vb)
    assert {**ma, "created": None} == {**mb, "created": None}


class BrokenEmbedder(WordsEmbedder):
    """Returns NaN for one example: a bad value the driver never sees under ray (a failure outside the sample)."""

    key = "test-broken"

    def __init__(self, bad_id: str):
        self.bad_id = bad_id

    def embed(self, frame, progress=None) -> np.ndarray:
        out = super().embed(frame)
        out[(frame["example_id"].astype(str) == self.bad_id).to_numpy()] = np.nan
        return out


def test_a_bad_vector_on_a_worker_is_the_in_process_error(analyzed, local_ray, tmp_path, monkeypatch):
    from erroranalysis.cluster import _sample, default_min_cluster_size
    from erroranalysis.core.errors import DataError

    source, _ = analyzed
    monkeypatch.setattr(blocks, "ROWS_PER_BLOCK", 128)
    failures = readers.read_predictions(Run.open(source)).query("~correct").reset_index(drop=True)
    rows = _sample.stratified_sample(_sample.strata_of(failures, len(failures)), failures["example_id"], 150, 3,
                                     floor=2 * default_min_cluster_size(len(failures)))
    bad = failures["example_id"].drop(index=rows).iloc[0]  # placed on a worker, never embedded on the driver
    errors = []
    for name, engine in (("local", None), ("ray", Engine("ray"))):
        shutil.copytree(source, tmp_path / name)
        with pytest.raises(DataError) as caught:
            cluster_run(tmp_path / name, ClusterParams(**FAST, max_fit=150), embedder=BrokenEmbedder(bad),
                        engine=engine)
        errors.append(str(caught.value))
        run = Run.open(tmp_path / name)
        assert run.manifest["stages"]["cluster"]["status"] == "failed"
        assert not (run.path / "assignments.parquet").exists()
    assert errors[0] == errors[1] == "embedder 'test-broken': returned NaN or infinite values."


def test_with_slices_and_checks_ray_reads_only_the_failures_rows(analyzed, local_ray, tmp_path, monkeypatch):
    """After the checks and slices stages, below `max_fit`: the slice groups, slice overlaps and label-issue
    shares read from those stages' tables filtered to the failures equal the in-process ones."""
    from erroranalysis.stages import CheckParams, SliceParams, checks_run, slices_run

    source, _ = analyzed
    monkeypatch.setattr(blocks, "ROWS_PER_BLOCK", 128)
    base = tmp_path / "base"
    shutil.copytree(source, base)
    checks_run(base, CheckParams(embedder="none"))
    slices_run(base, SliceParams(merge=False))
    local, _ = _cluster(base, tmp_path / "local", max_fit=1000)
    ray_run, _ = _cluster(base, tmp_path / "ray", Engine("ray"), max_fit=1000)
    clusters = readers.read_clusters(ray_run)
    assert {"slices", "label_issue_share"} <= set(clusters.columns)
    assert clusters["slices"].map(len).sum() > 0  # the planted groups' words are error slices
    pd.testing.assert_frame_equal(readers.read_clusters(local), clusters)
    pd.testing.assert_frame_equal(readers.read_assignments(local), readers.read_assignments(ray_run))


def test_the_cluster_command_takes_the_engine(analyzed, local_ray, tmp_path, monkeypatch):
    """`erroranalysis cluster RUN --engine ray` runs the stage on blocks (the static embedder, on the workers too)."""
    import json

    from typer.testing import CliRunner

    from erroranalysis.cli.app import app

    source, _ = analyzed
    monkeypatch.setattr(blocks, "ROWS_PER_BLOCK", 333)
    shutil.copytree(source, tmp_path / "run")
    result = CliRunner().invoke(app, ["cluster", str(tmp_path / "run"), "--engine", "ray", "--embedder", "static",
                                      "--reducer", "pca", "--layout", "pca", "--max-fit", "150", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["n_failures"] == sum(size for *_, size in GROUPS.values())
    run = Run.open(tmp_path / "run")
    assert run.manifest["stages"]["cluster"]["engine"]["placed_on_workers"] == 420 - 150
    assert (run.path / "assignments.parquet").is_dir()


class DriverlessEmbedder(WordsEmbedder):
    """Refuses to embed in the process that made it (the driver): the fit sample is embedded on a worker."""

    def __init__(self):
        self.driver = os.getpid()

    def embed(self, frame, progress=None) -> np.ndarray:
        if os.getpid() == self.driver:
            raise AssertionError("the driver embedded rows")
        return super().embed(frame, progress)


def test_the_driver_embeds_and_fits_nothing(analyzed, local_ray, tmp_path, monkeypatch):
    """Under ray the fit sample is embedded, fitted and laid out in a task on a worker, the other failures on the
    placing workers; the driver gets the fit back, not the vectors (the workers read them from embeddings.npy)."""
    source, _ = analyzed
    monkeypatch.setattr(blocks, "ROWS_PER_BLOCK", 333)
    shutil.copytree(source, tmp_path / "run")
    cluster_run(tmp_path / "run", ClusterParams(**FAST, max_fit=150), embedder=DriverlessEmbedder(),
                engine=Engine("ray"))
    run = Run.open(tmp_path / "run")
    facts = run.manifest["stages"]["cluster"]
    assert facts["engine"]["fitted_on"] == "a worker" and facts["engine"]["placed_on_workers"] == 420 - 150
    assert readers.read_embeddings(run)[0].shape == (150, 256)


# -- a generation run's failure modes, and vectors read by row (hidden states, a vectors file) -------------------


@pytest.fixture(scope="module")
def generation_run(tmp_path_factory):
    """A real generation run (`analyze` of outputs with planted failure modes over five topics: the real checks
    and signals write each failure's reason), clustered by nothing yet; 400 failures, 20 passing outputs."""
    import json

    from test_failure_modes import planted_rows

    folder = tmp_path_factory.mktemp("generation_blocks")
    rows = planted_rows(per_cell=20)
    data = folder / "outputs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = analyze("generation", data, folder / "run", Reading(data=DataOptions(id_column="id")),
                  after=AfterParams(checks=None, slices=None, cluster=None))
    return run.path, {r["id"]: r["mode"] for r in rows}


def test_failure_modes_below_max_fit_ray_writes_the_in_process_artifacts(generation_run, local_ray, tmp_path,
                                                                        monkeypatch):
    source, _ = generation_run
    monkeypatch.setattr(blocks, "ROWS_PER_BLOCK", 128)
    local, _ = _cluster(source, tmp_path / "local", max_fit=1000)
    ray_run, _ = _cluster(source, tmp_path / "ray", Engine("ray"), max_fit=1000)
    assert ray_run.manifest["stages"]["cluster"]["method"] == "failure_modes"
    pd.testing.assert_frame_equal(readers.read_assignments(local), readers.read_assignments(ray_run))
    pd.testing.assert_frame_equal(readers.read_clusters(local), readers.read_clusters(ray_run))
    np.testing.assert_array_equal(readers.read_embeddings(local)[0], readers.read_embeddings(ray_run)[0])


def test_failure_modes_above_max_fit_are_found_from_the_sample(generation_run, local_ray, tmp_path, monkeypatch):
    """120 of 400 failures fitted, stratified by failure mode; the workers place the rest by their mode: each
    planted mode is one cluster of its own, named by its failure, sized over every failure."""
    from collections import Counter

    from test_failure_modes import MODES

    source, mode_of_id = generation_run
    monkeypatch.setattr(blocks, "ROWS_PER_BLOCK", 64)
    run, summary = _cluster(source, tmp_path / "ray", Engine("ray"), max_fit=120)
    facts = run.manifest["stages"]["cluster"]
    assert facts["method"] == "failure_modes" and "stratified by failure mode" in facts["note"]
    assert facts["engine"]["fit_sample_strata"] == "failure mode" and facts["engine"]["fit_sample"] == 120
    assert facts["engine"]["placed_on_workers"] == 400 - 120
    assert facts["resolved"]["fit_sample_strata"] == "failure mode"
    fitted = readers.read_embeddings(run)[1]["example_ids"]
    assert sorted(Counter(mode_of_id[i] for i in fitted).values()) == [30] * 4  # the modes' shares: 100 each
    assignments = readers.read_assignments(run)
    failing = assignments[assignments["failure"]]
    cluster_of = dict(zip(failing["example_id"], failing["cluster_id"]))
    found = {}
    for mode in MODES:
        ids = [i for i, m in mode_of_id.items() if m == mode]
        found[mode] = {cluster_of[i] for i in ids}
        assert len(found[mode]) == 1 and -1 not in found[mode], mode  # purity 1: the mode decides
    assert len(set.union(*found.values())) == len(MODES)
    clusters = readers.read_clusters(run)
    assert sorted(clusters["size"]) == [100] * 4 and summary["n_clusters"] == 4
    names = dict(zip(clusters["cluster_id"], clusters["name"]))
    assert names[found["refusal"].pop()].startswith("refuses to answer")
    assert names[found["prose before"].pop()].startswith("text before the JSON")
    assert np.isfinite(failing[["x", "y"]].to_numpy()).all()


def planted_vectors(path: Path, data: pd.DataFrame) -> Path:
    """A vectors file for the planted run, one row per prediction in order: each planted group around a direction
    of its own, the rest noise (what a user's own embedding of these texts would look like)."""
    rng = np.random.default_rng(5)
    centres = {name: rng.normal(size=32) * 3 for name in GROUPS}
    vectors = np.stack([centres[g] + rng.normal(size=32) if g else rng.normal(size=32) for g in data["group"]])
    np.save(path, vectors.astype(np.float32))
    return path


def _cluster_by(source: Path, out: Path, engine=None, **params) -> tuple[Run, dict]:
    shutil.copytree(source, out)
    return Run.open(out), cluster_run(out, ClusterParams(**FAST, **params), engine=engine)


def test_a_vectors_file_is_read_by_row(analyzed, local_ray, tmp_path, monkeypatch):
    """`--embedder FILE.npy`: below max_fit the in-process artifacts; above it the planted groups recovered from
    the sample, whose stored vectors are the file's rows of the sampled ids, read by row on the workers (the driver
    reads none)."""
    source, data = analyzed
    monkeypatch.setattr(blocks, "ROWS_PER_BLOCK", 128)
    file = planted_vectors(tmp_path / "vectors.npy", data)
    local, _ = _cluster_by(source, tmp_path / "local", embedder=str(file), max_fit=1000)
    ray_run, _ = _cluster_by(source, tmp_path / "ray", Engine("ray"), embedder=str(file), max_fit=1000)
    pd.testing.assert_frame_equal(readers.read_assignments(local), readers.read_assignments(ray_run))
    pd.testing.assert_frame_equal(readers.read_clusters(local), readers.read_clusters(ray_run))
    assert {**readers.read_embeddings(local)[1], "created": None} == {**readers.read_embeddings(ray_run)[1],
                                                                       "created": None}
    from erroranalysis.embed.vector_files import RowVectors

    def not_here(self, frame, progress=None):
        raise AssertionError("the driver read rows of the vectors file")

    with monkeypatch.context() as patch:  # this process only: the Ray workers read the rows
        patch.setattr(RowVectors, "embed", not_here)
        sampled, _ = _cluster_by(source, tmp_path / "sampled", Engine("ray"), embedder=str(file), max_fit=150)
    _found_groups(readers.read_assignments(sampled), data)
    stored, meta = readers.read_embeddings(sampled)
    row = {i: r for r, i in enumerate(data["id"])}
    np.testing.assert_array_equal(stored, np.load(file)[[row[i] for i in meta["example_ids"]]])
    assert meta["embedder"]["name"] == "file" and meta["sample_of"] == 420


def test_a_vectors_file_keyed_by_id_and_its_errors(analyzed, local_ray, tmp_path, monkeypatch):
    """A file whose rows are named by a sidecar (here in reverse order) gives the same clustering; a file whose
    rows do not match the run, or with a NaN in a row a worker reads, is the same one-line error under both
    engines, nothing written."""
    import json

    from erroranalysis.core.errors import DataError

    source, data = analyzed
    monkeypatch.setattr(blocks, "ROWS_PER_BLOCK", 128)
    file = planted_vectors(tmp_path / "vectors.npy", data)
    keyed = tmp_path / "keyed" / "vectors.npy"
    keyed.parent.mkdir()
    np.save(keyed, np.load(file)[::-1])
    keyed.with_suffix(".json").write_text(json.dumps({"example_ids": data["id"].iloc[::-1].tolist()}))
    by_row, _ = _cluster_by(source, tmp_path / "by_row", Engine("ray"), embedder=str(file), max_fit=150)
    by_id, _ = _cluster_by(source, tmp_path / "by_id", Engine("ray"), embedder=str(keyed), max_fit=150)
    columns = ["example_id", "cluster_id", "membership", "tier"]
    pd.testing.assert_frame_equal(readers.read_assignments(by_row)[columns], readers.read_assignments(by_id)[columns])
    short = tmp_path / "short.npy"
    np.save(short, np.load(file)[:-1])
    errors = []
    for name, engine in (("local", None), ("ray", Engine("ray"))):
        with pytest.raises(DataError) as caught:
            _cluster_by(source, tmp_path / f"short_{name}", engine, embedder=str(short), max_fit=150)
        errors.append(str(caught.value))
        assert not (tmp_path / f"short_{name}" / "assignments.parquet").exists()
    assert errors[0] == errors[1] and "979 rows but the run has 980 predictions" in errors[0]
    failures = readers.read_predictions(Run.open(source)).query("~correct")
    fitted = set(readers.read_embeddings(by_row)[1]["example_ids"])
    placed = next(i for i in failures["example_id"] if i not in fitted)  # read by a placing worker under ray
    bad = np.load(file)
    bad[data.index[data["id"] == placed][0], 3] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    errors = []
    for name, engine in (("local", None), ("ray", Engine("ray"))):
        with pytest.raises(DataError) as caught:
            _cluster_by(source, tmp_path / f"nan_{name}", engine, embedder=str(tmp_path / "nan.npy"), max_fit=150)
        errors.append(str(caught.value))
    assert errors[0] == errors[1] == f"{tmp_path / 'nan.npy'}: contains NaN or infinite values; fix the vectors " \
        "that produced them."


@pytest.fixture(scope="module")
def checkpoint_run(tiny_checkpoint, tmp_path_factory) -> Path:
    """A real inference run of the tiny checkpoint over 300 examples: predictions and hidden_states.npy."""
    from conftest import eval_rows, write_jsonl

    from erroranalysis.stages import InferParams, run_checkpoint

    folder = tmp_path_factory.mktemp("checkpoint_run")
    data = write_jsonl(folder / "eval.jsonl", eval_rows(300))
    return run_checkpoint(tiny_checkpoint, data, folder / "run", data_opts=DataOptions(id_column="id"),
                          infer_opts=InferParams(batch_size=32, max_length=32),
                          after=AfterParams(checks=None, slices=None, cluster=None)).path


def test_hidden_states_are_read_by_row(checkpoint_run, local_ray, tmp_path, monkeypatch):
    """`--embedder hidden` on a real checkpoint run: below max_fit the in-process artifacts; above it the fit
    sample's stored vectors are the hidden states' rows of its ids, and every failure is assigned."""
    monkeypatch.setattr(blocks, "ROWS_PER_BLOCK", 64)
    local, _ = _cluster_by(checkpoint_run, tmp_path / "local", embedder="hidden", max_fit=1000)
    ray_run, _ = _cluster_by(checkpoint_run, tmp_path / "ray", Engine("ray"), embedder="hidden", max_fit=1000)
    pd.testing.assert_frame_equal(readers.read_assignments(local), readers.read_assignments(ray_run))
    pd.testing.assert_frame_equal(readers.read_clusters(local), readers.read_clusters(ray_run))
    assert readers.read_embeddings(local)[1]["embedder"] == readers.read_embeddings(ray_run)[1]["embedder"]
    n_fail = int((~readers.read_predictions(local)["correct"]).sum())
    assert n_fail > 100
    from erroranalysis.embed.vector_files import RowVectors

    with monkeypatch.context() as patch:  # the driver reads no row of hidden_states.npy
        patch.setattr(RowVectors, "embed", lambda *a, **k: (_ for _ in ()).throw(AssertionError("read here")))
        sampled, _ = _cluster_by(checkpoint_run, tmp_path / "sampled", Engine("ray"), embedder="hidden",
                                 max_fit=100)
    stored, meta = readers.read_embeddings(sampled)
    ids = readers.read_predictions(sampled)["example_id"].tolist()
    np.testing.assert_array_equal(stored, readers.read_hidden(sampled)[[ids.index(i) for i in meta["example_ids"]]])
    assert sampled.manifest["stages"]["cluster"]["engine"]["placed_on_workers"] == n_fail - 100
    assert np.isfinite(readers.read_assignments(sampled).query("failure")[["x", "y"]].to_numpy()).all()
