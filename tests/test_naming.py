import numpy as np
import pandas as pd
import pytest

from erroranalysis.cluster import (
    class_tfidf,
    cluster_name,
    cluster_summary,
    describe_clusters,
    pick_keywords,
    short_text,
)
from erroranalysis.core.errors import ParameterError
from erroranalysis.core.schemas import CLUSTER_NAMING_COLUMNS, CLUSTERS


def failures_frame():
    oil = [f"oil prices rose as crude supply fell in week {i} market report" for i in range(6)]
    tennis = [f"tennis star wins the final set at the open match {i}" for i in range(4)]
    other = ["market report on the week", "the final report"]
    texts = oil + tennis + other
    labels = ["business"] * 6 + ["sport"] * 4 + ["business", "sport"]
    preds = ["politics"] * 5 + ["tech"] + ["music"] * 4 + ["tech", "tech"]
    frame = pd.DataFrame({"example_id": [f"f{i}" for i in range(12)], "text": texts, "label": labels, "pred": preds,
                          "confidence": np.linspace(0.5, 0.9, 12), "loss": np.linspace(1, 2, 12),
                          "n_tokens": np.arange(12) + 5, "truncated": [True] + [False] * 11})
    cluster_ids = np.array([0] * 6 + [1] * 4 + [-1, -1])
    return frame, cluster_ids


CORRECT = ["market report on the economy and the week ahead", "the match report for the week",
           "a report on the final market"] * 3


def test_class_tfidf_finds_distinctive_terms():
    texts = ["red apple", "red apple pie", "blue sky", "blue sea", "apple sky"]
    terms, ids, scores, counts = class_tfidf(texts, np.array([0, 0, 1, 1, -2]), ngram_range=(1, 1), min_df=1)
    assert ids.tolist() == [-2, 0, 1]
    row = scores[list(ids).index(0)]
    assert terms[row.argmax()] == "red"
    assert counts[list(ids).index(1)][list(terms).index("blue")] == 2


def test_class_tfidf_no_terms():
    terms, ids, scores, counts = class_tfidf(["the", "a"], np.array([0, 1]))
    assert len(terms) == 0 and scores.shape == (2, 0)


def test_pick_keywords_skips_repeats_and_rare():
    terms = np.array(["oil prices", "oil", "prices", "crude", "rare", "goal goal"])
    scores = np.array([5.0, 4.0, 3.0, 2.0, 9.0, 8.0])
    counts = np.array([3, 3, 3, 3, 1, 3])
    keywords, values = pick_keywords(terms, scores, counts, n=3)
    assert keywords == ["oil prices", "crude"]
    assert values == [5.0, 2.0]


def test_keywords_are_distinct_phrases():
    # inflections of one stem count once; a phrase that covers most of its word's documents stands in for it
    terms = np.array(["economy", "economic", "economist", "games", "video games", "growth", "japan", "japanese"])
    scores = np.array([9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.5])
    counts = np.array([9, 8, 7, 10, 8, 5, 4, 4])
    keywords, values = pick_keywords(terms, scores, counts, n=5)
    assert keywords == ["economy", "video games", "growth", "japan"]
    assert values[1] == 6.0  # the phrase took its word's score
    # a phrase in few of its word's documents does not stand in for it: the word stays, and the phrase, which
    # repeats it, is skipped
    counts[4] = 3
    assert pick_keywords(terms, scores, counts, n=3)[0] == ["economy", "games", "growth"]


def test_keywords_contrast_with_correct_examples_and_common_words():
    terms = np.array(["market", "oil", "said ministers", "ministers"])
    scores = np.array([5.0, 4.0, 3.0, 2.0])
    counts = np.array([6, 6, 6, 6])
    contrast = np.array([0.6, 0.05, 0.0, 0.0])  # share of correct examples holding each term
    keywords, _ = pick_keywords(terms, scores, counts, n=4, common=frozenset({"said"}), contrast=contrast, size=6)
    assert keywords == ["oil", "ministers"]


def test_cluster_summary_sentences():
    conf = [{"label": "tech", "pred": "business", "count": 8, "share": 0.8}]
    gold = [{"label": "tech", "share": 1.0}]
    assert cluster_summary(["oil prices", "opec", "barrels"], conf, gold, share=0.12, confidence=0.86) == \
        "Texts about oil prices, opec and barrels: tech read as business in 80%; 12% of the failures; " \
        "confidently wrong (mean confidence 0.86)."
    both = [{"label": "a", "pred": "b", "count": 5, "share": 0.5}, {"label": "b", "pred": "a", "count": 4,
                                                                       "share": 0.4}]
    text = cluster_summary([], both, [], share=0.004, title='text contains "weather"', kind="scattered")
    assert text == 'Text contains "weather": a and b read as each other (50% and 40%); under 1% of the ' \
        "failures; scattered among correct examples."
    assert cluster_summary(["x"], [], [], share=0.5, confidence=0.3).endswith("unsure (mean confidence 0.30).")
    assert cluster_name(["weather"], both, [], []) == "a <-> b: weather"


def test_cluster_name_forms():
    conf = [{"label": "tech", "pred": "business", "count": 8, "share": 0.8}]
    assert cluster_name(["oil", "prices", "shares", "x"], conf, [], []) == "tech -> business: oil, prices, shares"
    weak = [{"label": "tech", "pred": "business", "count": 3, "share": 0.3}]
    gold = [{"label": "tech", "share": 0.7}]
    pred = [{"label": "business", "share": 0.3}]
    assert cluster_name(["oil"], weak, gold, pred) == "tech -> *: oil"
    assert cluster_name(["oil"], weak, [{"label": "tech", "share": 0.4}], [{"label": "sport", "share": 0.9}]) == \
        "* -> sport: oil"
    assert cluster_name(["oil"], weak, [{"label": "a", "share": 0.4}], [{"label": "b", "share": 0.4}]) == "oil"
    assert cluster_name([], conf, [], [], kind="scattered") == "tech -> business (scattered)"
    assert cluster_name([], [], [], []) == "unnamed"


def test_describe_clusters_table():
    frame, ids = failures_frame()
    vectors = np.random.default_rng(0).normal(size=(12, 4))
    vectors[2] = vectors[:6].mean(axis=0)  # f2 is the centre of cluster 0
    out = describe_clusters(frame, ids, vectors=vectors, correct_texts=CORRECT, kinds={0: "systematic", 1: "scattered"},
                            local_error_rate=np.full(12, 0.5, np.float32), reassigned=np.array([True] + [False] * 11),
                            membership=np.ones(12))
    assert list(out.columns) == list(CLUSTER_NAMING_COLUMNS)
    assert out["cluster_id"].tolist() == [0, 1] and out["size"].tolist() == [6, 4]
    first, second = out.iloc[0], out.iloc[1]
    assert first["name"].startswith("business -> politics: ")
    assert "oil" in " ".join(first["keywords"]) and "crude" in " ".join(first["keywords"])
    assert "report" not in first["keywords"] and "market" not in first["keywords"]  # shared with correct examples
    assert first["exemplar_ids"][0] == "f2"
    assert first["top_confusions"][:2] == ["business -> politics", "business -> tech"]
    assert first["top_confusion_counts"][:2] == [5, 1]
    assert first["top_confusion_shares"][0] == pytest.approx(5 / 6, abs=1e-4)
    assert first["gold_labels"] == ["business"] and first["gold_shares"] == [1.0]
    assert first["share_of_failures"] == pytest.approx(0.5)
    assert first["truncated_share"] == pytest.approx(1 / 6, abs=1e-4)
    assert first["mean_confidence"] == pytest.approx(frame["confidence"][:6].mean(), abs=1e-4)
    assert first["reassigned"] == 1 and first["local_error_rate"] == pytest.approx(0.5)
    assert first["kind"] == "systematic"
    assert second["name"].startswith("sport -> music: ") and second["name"].endswith("(scattered)")
    assert "tennis" in " ".join(second["keywords"])


def test_describe_without_optional_columns():
    frame, ids = failures_frame()
    frame = frame[["example_id", "text", "label", "pred"]]
    out = describe_clusters(frame, ids, membership=np.linspace(0.1, 1, 12))
    assert np.isnan(out["mean_confidence"]).all() and np.isnan(out["truncated_share"]).all()
    assert out.iloc[0]["exemplar_ids"][0] == "f5"  # the strongest member without vectors
    assert np.isnan(out["local_error_rate"]).all()


def test_describe_no_clusters():
    frame, _ = failures_frame()
    out = describe_clusters(frame, np.full(12, -1))
    assert list(out.columns) == list(CLUSTER_NAMING_COLUMNS) and len(out) == 0
    assert {c: str(out[c].dtype) for c in CLUSTERS.dtypes if c in out} == {
        c: str(pd.Series(dtype=d).dtype) for c, d in CLUSTERS.dtypes.items() if c in out}
    out = describe_clusters(frame.iloc[:0], np.zeros(0, np.int64))
    assert len(out) == 0


def test_describe_limits():
    frame, ids = failures_frame()
    out = describe_clusters(frame, ids, n_keywords=2, n_exemplars=1)
    assert all(len(k) <= 2 for k in out["keywords"]) and all(len(e) == 1 for e in out["exemplar_ids"])
    with pytest.raises(ParameterError, match="^n_keywords="):
        describe_clusters(frame, ids, n_keywords=0)
    with pytest.raises(ParameterError, match="^n_exemplars="):
        describe_clusters(frame, ids, n_exemplars=100)


def test_short_text():
    assert short_text("a\n  b") == "a b"
    assert len(short_text("x" * 500, 20)) == 20
