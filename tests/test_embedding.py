import json

import numpy as np
import pandas as pd
import pytest
from fake_runs import inferred_run

from erroranalysis.core.errors import DataError, ParameterError, RunError
from erroranalysis.embed.models import (
    EmbeddingCache,
    MiniLMEmbedder,
    cache_root,
    describe,
    text_hashes,
)
from erroranalysis.embed.vector_files import HiddenStatesEmbedder, PrecomputedEmbedder
from erroranalysis.stages.embedders import resolve_embedder


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("ERRORANALYSIS_CACHE_DIR", str(tmp_path / "cache"))


class CountingEmbedder(MiniLMEmbedder):
    """MiniLMEmbedder with a fake model: counts the texts it is asked to encode."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.encoded: list[str] = []

    def _encode(self, texts, progress, done, total):
        self.encoded.extend(texts)
        return np.array([[len(t), t.count("a"), 1.0] for t in texts], dtype=np.float32)


def make_run(path, n=6, hidden=None):
    df = pd.DataFrame({"example_id": [f"e{i}" for i in range(n)], "text": [f"text {i}" for i in range(n)],
                       "label": ["x"] * n, "pred": ["y"] * n, "correct": [False] * n})
    return inferred_run(path, df, labels=["x", "y"], hidden=hidden), df


def test_cache_root_from_env(tmp_path):
    assert cache_root() == tmp_path / "cache"


def test_text_hashes_stable_and_distinct():
    h = text_hashes(["a", "b", "a"])
    assert h.dtype == np.dtype("S16")
    assert h[0] == h[2] and h[0] != h[1]
    assert text_hashes(["a"])[0] == h[0]


def test_cache_roundtrip_and_misses(tmp_path):
    cache = EmbeddingCache("k1", tmp_path / "c")
    vectors, hit = cache.get(text_hashes(["a"]))
    assert vectors is None and not hit.any()
    cache.put(text_hashes(["a", "b"]), np.array([[1, 2], [3, 4]], np.float32))
    vectors, hit = cache.get(text_hashes(["b", "z", "a"]))
    assert hit.tolist() == [True, False, True]
    assert vectors[0].tolist() == [3, 4] and vectors[2].tolist() == [1, 2] and vectors[1].tolist() == [0, 0]
    other = EmbeddingCache("k2", tmp_path / "c")
    assert not other.get(text_hashes(["a"]))[1].any()


def test_cache_merges_shards(tmp_path):
    cache = EmbeddingCache("k", tmp_path / "c", max_shards=3)
    for i in range(5):
        cache.put(text_hashes([f"t{i}"]), np.full((1, 2), i, np.float32))
    assert len(list(cache.folder.glob("*.npz"))) <= 3
    vectors, hit = cache.get(text_hashes([f"t{i}" for i in range(5)]))
    assert hit.all() and vectors[:, 0].tolist() == [0, 1, 2, 3, 4]


def test_cache_ignores_damaged_shard(tmp_path):
    cache = EmbeddingCache("k", tmp_path / "c")
    cache.put(text_hashes(["a"]), np.ones((1, 2), np.float32))
    (cache.folder / "zz-broken.npz").write_bytes(b"not a zip")
    vectors, hit = cache.get(text_hashes(["a"]))
    assert hit.all()


def test_minilm_embeds_each_text_once():
    embedder = CountingEmbedder()
    first = embedder.embed_texts(["aa", "b", "aa"])
    assert sorted(embedder.encoded) == ["aa", "b"]  # duplicates encoded once
    assert first[0].tolist() == first[2].tolist()
    again = CountingEmbedder()
    second = again.embed_texts(["b", "aa", "new a"])
    assert again.encoded == ["new a"]  # the rest came from the cache
    assert np.allclose(second[:2], first[[1, 0]])
    off = CountingEmbedder(cache=False)
    off.embed_texts(["aa"])
    assert off.encoded == ["aa"]


def test_minilm_progress_and_batch_form():
    calls = []
    embedder = CountingEmbedder()
    embedder.embed_texts(["a", "b", "c"], progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (3, 3)
    out = embedder({"text": ["a", "b"], "example_id": ["1", "2"]})
    assert out["embedding"].shape == (2, 3) and out["example_id"] == ["1", "2"]
    assert embedder.embed_texts([]).shape == (0, 384)


def test_minilm_key_depends_on_max_length():
    assert MiniLMEmbedder(max_length=128).key != MiniLMEmbedder().key
    with pytest.raises(ParameterError, match="^max_length="):
        MiniLMEmbedder(max_length=4)
    with pytest.raises(ParameterError, match="^batch_size="):
        MiniLMEmbedder(batch_size=0)


def test_precomputed_in_row_order(tmp_path):
    run, df = make_run(tmp_path / "run")
    file = tmp_path / "vecs.npy"
    np.save(file, np.arange(12, dtype=np.float32).reshape(6, 2))
    emb = resolve_embedder(str(file), run, df)
    assert isinstance(emb, PrecomputedEmbedder)
    assert emb.embed(df.iloc[[4, 1]]).tolist() == [[8, 9], [2, 3]]
    assert describe(emb)["name"] == "file"


def test_precomputed_with_sidecar_ids(tmp_path):
    run, df = make_run(tmp_path / "run")
    file = tmp_path / "vecs.npy"
    np.save(file, np.array([[1, 1], [2, 2], [3, 3]], np.float32))
    file.with_suffix(".json").write_text(json.dumps({"example_ids": ["e3", "e0", "e5"]}))
    emb = PrecomputedEmbedder(file, df["example_id"])
    assert emb.embed(df.iloc[[0, 3]]).tolist() == [[2, 2], [1, 1]]
    with pytest.raises(DataError, match="no vectors for example ids 'e1'"):
        emb.embed(df.iloc[[1]])


@pytest.mark.parametrize("content, sidecar, message", [
    (np.zeros((5, 2), np.float32), None, "5 rows but the run has 6"),
    (np.zeros(6, np.float32), None, "is not \\[n, d\\]"),
    (np.full((6, 2), np.nan, np.float32), None, "NaN"),
    (np.array([["a", "b"]] * 6), None, "not numeric"),
    (np.zeros((3, 2), np.float32), {"example_ids": ["e0", "e1"]}, "2 example ids for 3 rows"),
    (np.zeros((2, 2), np.float32), {"example_ids": ["e0", "e0"]}, "not unique"),
    (np.zeros((2, 2), np.float32), {"ids": []}, "'example_ids' list"),
])
def test_precomputed_bad_files(tmp_path, content, sidecar, message):
    _, df = make_run(tmp_path / "run")
    file = tmp_path / "vecs.npy"
    np.save(file, content)
    if sidecar is not None:
        file.with_suffix(".json").write_text(json.dumps(sidecar))
    with pytest.raises(DataError, match=message):
        PrecomputedEmbedder(file, df["example_id"])


def test_precomputed_missing_or_wrong_kind(tmp_path):
    run, df = make_run(tmp_path / "run")
    with pytest.raises(DataError, match="no such embeddings file"):
        resolve_embedder(str(tmp_path / "nope.npy"), run, df)
    (tmp_path / "vecs.txt").write_text("1 2")
    with pytest.raises(DataError, match="must be a .npy file"):
        resolve_embedder(str(tmp_path / "vecs.txt"), run, df)
    (tmp_path / "bad.npy").write_bytes(b"garbage")
    with pytest.raises(DataError, match="unreadable"):
        resolve_embedder(str(tmp_path / "bad.npy"), run, df)


def test_unknown_embedder_name(tmp_path):
    run, df = make_run(tmp_path / "run")
    with pytest.raises(ParameterError, match="expected 'auto', 'static', 'minilm', 'hidden'"):
        resolve_embedder("sbert", run, df)
    with pytest.raises(ParameterError, match="^embedder="):
        resolve_embedder("", run, df)


def test_hidden_states(tmp_path):
    hidden = np.arange(18, dtype=np.float32).reshape(6, 3)
    run, df = make_run(tmp_path / "run", hidden=hidden)
    emb = resolve_embedder("hidden", run, df)
    assert isinstance(emb, HiddenStatesEmbedder)
    assert emb.embed(df.iloc[[5, 0]]).tolist() == [hidden[5].tolist(), hidden[0].tolist()]


def test_hidden_states_missing_or_misaligned(tmp_path):
    run, df = make_run(tmp_path / "a")
    with pytest.raises(RunError, match="no hidden_states.npy"):
        resolve_embedder("hidden", run, df)
    run, df = make_run(tmp_path / "b", hidden=np.zeros((4, 3), np.float32))
    with pytest.raises(RunError, match=r"shape \(4, 3\) does not have one row per prediction"):
        resolve_embedder("hidden", run, df)


def test_custom_embedder_passes_through(tmp_path):
    run, df = make_run(tmp_path / "run")

    class Mine:
        key = "mine"

        def embed(self, frame, progress=None):
            return np.ones((len(frame), 2), np.float32)

    emb = Mine()
    assert resolve_embedder(emb, run, df) is emb
    assert describe(emb) == {"name": "Mine", "key": "mine"}


@pytest.mark.slow
def test_minilm_real_model():
    from erroranalysis.embed.models import load_minilm

    embedder = MiniLMEmbedder()
    texts = ["The striker scored a late goal.", "A late goal from the striker won it.",
             "Shares fell as the bank cut its profit forecast."]
    vectors = embedder.embed_texts(texts)
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    sims = vectors @ vectors.T
    assert sims[0, 1] > sims[0, 2] + 0.2
    assert load_minilm.cache_info().currsize >= 1
    # batch composition does not change a text's vector
    alone = MiniLMEmbedder(cache=False).embed_texts(texts[2:])
    assert np.allclose(alone[0], vectors[2], atol=1e-5)


def test_check_vectors_rule():
    from erroranalysis.embed.choice import plan

    checks = ("label_issues", "duplicates", "leakage", "shift")
    assert plan("auto", has_hidden=True, n_rows=100, uses=checks).source == "hidden"
    assert plan("auto", has_hidden=False, n_rows=100, uses=checks).source == "minilm"  # small: MiniLM is cheap
    assert plan("minilm", has_hidden=True, n_rows=100).source == "minilm"
    assert plan("none", has_hidden=True, n_rows=100).source == "none"
    with pytest.raises(DataError, match="no hidden states"):
        plan("hidden", has_hidden=False, n_rows=100)
    with pytest.raises(ParameterError, match="embedder='bert'"):
        plan("bert", has_hidden=True, n_rows=100)


def test_checks_use_the_runs_hidden_states_and_expose_them(tmp_path):
    """A run with hidden states: the checks' near duplicates come from them (no second model), and
    `check_vectors` returns the same vectors for other checks (the neighbour-based label-issue signal)."""
    from erroranalysis.stages import check_vectors, checks_run

    hidden = np.eye(6, 8, dtype=np.float32) + 0.01
    hidden[3] = hidden[0] * 1.01  # rows 0 and 3: near duplicates in the checkpoint's eyes only
    run, _ = make_run(tmp_path / "run", hidden=hidden)
    summary = checks_run(run.path)
    assert run.manifest["stages"]["checks"]["params"]["embedder"] == "hidden"
    assert summary["n_duplicate_groups"] == 1
    vectors, source = check_vectors(run.path)
    assert source == "hidden"
    np.testing.assert_array_equal(vectors, hidden)
    assert check_vectors(run.path, "none") == (None, "none")


def test_checks_of_a_run_without_hidden_states_embed_with_minilm(tmp_path, monkeypatch):
    from erroranalysis.stages import check_vectors

    run, df = make_run(tmp_path / "run")
    seen = []
    monkeypatch.setattr(MiniLMEmbedder, "embed_texts", lambda self, texts: seen.append(list(texts)) or
                        np.ones((len(texts), 3), np.float32))
    vectors, source = check_vectors(run.path)
    assert source == "minilm" and seen == [df["text"].tolist()] and vectors.shape == (6, 3)
