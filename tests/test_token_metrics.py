"""Token-classification metrics against seqeval on the same tag sequences: entity extraction and precision, recall
and F1 per type, micro, macro and weighted, in seqeval's default (conlleval) mode and its strict mode (IOB2, IOBES),
including ill-formed sequences; and the error-span kinds on hand-made cases."""

from __future__ import annotations

import random

import pytest

from erroranalysis.metrics import tokens as tm

TYPES = ["PER", "LOC", "ORG"]


def _random_tags(rng: random.Random, scheme: str, n: int) -> list[str]:
    prefixes = tm.PREFIXES["IOBES" if scheme == "IOBES" else "IOB2"]
    return ["O" if rng.random() < 0.4 else f"{rng.choice(prefixes)}-{rng.choice(TYPES)}" for _ in range(n)]


def _sentences(scheme: str, seed: int, n: int = 300):
    rng = random.Random(seed)
    gold = [_random_tags(rng, scheme, rng.randint(1, 12)) for _ in range(n)]
    pred = [[t if rng.random() < 0.6 else _random_tags(rng, scheme, 1)[0] for t in s] for s in gold]
    return gold, pred


@pytest.mark.parametrize("scheme", ["IOB2", "IOBES"])
@pytest.mark.parametrize("mode", ["default", "strict"])
def test_entities_and_scores_match_seqeval(scheme, mode):
    from seqeval.metrics import classification_report
    from seqeval.metrics.sequence_labeling import get_entities
    from seqeval.scheme import IOB2, IOBES, Entities

    gold, pred = _sentences(scheme, seed=len(scheme) * 10 + len(mode))
    for sentence in gold + pred:
        ours = sorted(tm.spans_of(sentence, scheme, mode))
        if mode == "default":
            theirs = sorted((s, e + 1, t) for t, s, e in get_entities(sentence))
        else:
            found = Entities([sentence], IOBES if scheme == "IOBES" else IOB2).entities[0]
            theirs = sorted((e.start, e.end, e.tag) for e in found)
        assert ours == theirs, sentence

    kwargs = {} if mode == "default" else {"mode": "strict", "scheme": IOBES if scheme == "IOBES" else IOB2}
    report = classification_report(gold, pred, output_dict=True, zero_division=0, **kwargs)
    ours = tm.entity_scores([tm.spans_of(s, scheme, mode) for s in gold], [tm.spans_of(s, scheme, mode) for s in pred])
    for kind in TYPES:
        for metric in ("precision", "recall", "f1"):
            assert ours["per_type"][kind][metric] == pytest.approx(report[kind][metric.replace("f1", "f1-score")])
        assert ours["per_type"][kind]["support"] == report[kind]["support"]
    for avg, name in (("micro", "micro avg"), ("macro", "macro avg"), ("weighted", "weighted avg")):
        for metric in ("precision", "recall", "f1"):
            assert ours[avg][metric] == pytest.approx(report[name][metric.replace("f1", "f1-score")]), (avg, metric)


def test_token_accuracy_and_confusion_match_sklearn():
    from sklearn.metrics import accuracy_score, confusion_matrix

    gold, pred = _sentences("IOB2", seed=3)
    scores = tm.token_scores(gold, pred, "IOB2", TYPES)
    flat_g = [t for s in gold for t in s]
    flat_p = [t for s in pred for t in s]
    assert scores["accuracy"] == pytest.approx(accuracy_score(flat_g, flat_p))
    labels = scores["confusion"]["labels"]
    assert labels == [*TYPES, "O"]
    expected = confusion_matrix([tm.word_type(t, "IOB2") for t in flat_g], [tm.word_type(t, "IOB2") for t in flat_p],
                                labels=labels)
    assert scores["confusion"]["matrix"] == expected.tolist()


def test_plain_scheme_and_encoding_round_trip():
    assert tm.spans_of(["NN", "NN", "VB", "O", "DT"], "plain") == [(0, 2, "NN"), (2, 3, "VB"), (4, 5, "DT")]
    spans = [(0, 2, "PER"), (3, 4, "LOC"), (5, 8, "ORG")]
    for scheme in ("IOB2", "IOBES"):
        tags = tm.encode_spans(9, spans, scheme)
        assert tm.spans_of(tags, scheme, "strict") == spans == tm.spans_of(tags, scheme)
    assert tm.encode_spans(4, [(0, 1, "PER"), (1, 4, "LOC")], "IOBES") == ["S-PER", "B-LOC", "I-LOC", "E-LOC"]


def test_scheme_detection():
    assert tm.detect_scheme(["O", "B-PER", "I-PER"]) == "IOB2"
    assert tm.detect_scheme(["O", "B-PER", "I-PER", "E-PER", "S-PER"]) == "IOBES"
    assert tm.detect_scheme(["NN", "VB", "DT"]) == "plain"
    assert tm.detect_scheme(["O", "B-PER", "I-PER"], "BIO") == "IOB2"
    with pytest.raises(ValueError, match="mix"):
        tm.detect_scheme(["O", "B-PER", "NN"])
    with pytest.raises(ValueError, match="not plain"):
        tm.detect_scheme(["O", "B-PER"], "plain")


@pytest.mark.parametrize("gold,pred,expected", [
    ([(0, 2, "PER")], [(0, 2, "PER")], [("gold", "correct")]),
    ([(0, 2, "PER")], [(0, 2, "LOC")], [("gold", "wrong_type")]),
    ([(0, 2, "PER")], [(0, 1, "PER")], [("gold", "wrong_boundary")]),
    ([(0, 2, "PER")], [(1, 3, "LOC")], [("gold", "wrong_type_boundary")]),
    ([(0, 2, "PER")], [], [("gold", "missed")]),
    ([], [(3, 4, "ORG")], [("pred", "spurious")]),
    # a gold span split in two predicted ones: the better match is the gold's, the other is a boundary error
    ([(0, 3, "PER")], [(0, 1, "PER"), (1, 3, "PER")], [("gold", "wrong_boundary"), ("pred", "wrong_boundary")]),
    ([(0, 1, "PER"), (4, 5, "LOC")], [(0, 1, "PER"), (2, 3, "LOC")],
     [("gold", "correct"), ("pred", "spurious"), ("gold", "missed")]),
])
def test_error_kinds(gold, pred, expected):
    rows = tm.classify_spans(gold, pred)
    assert [(r["source"], r["kind"]) for r in rows] == expected
    assert sum(r["source"] == "gold" for r in rows) == len(gold)


def test_capitalization():
    assert [tm.capitalization(s) for s in ("New York", "NASA", "paris", "eBay", "1984")] == \
        ["title", "upper", "lower", "mixed", "none"]
