"""Token classification (NER, POS, chunking): tag schemes, entity spans, entity-level and token-level metrics, and
the classification of error spans. Pure functions over lists of tags.

Spans are `(start, end, type)` over word positions, `end` exclusive. Two readings of a tag sequence, as seqeval's:

- default (conlleval's, seqeval's `mode=None`): lenient, an `I-X` after `O` or after another type opens an entity,
  so IOB1 data and ill-formed predictions still give entities;
- strict (seqeval's `mode="strict"` with IOB2 or IOBES): only well-formed entities count (`B-X I-X*` in IOB2;
  `S-X` or `B-X I-X* E-X` in IOBES), and an `I-X` without its `B-X` is no entity.

The `plain` scheme (tags without prefixes, such as POS tags) makes each maximal run of one tag a span.

Error spans follow NER error analysis (Fu et al. 2020, ExplainaBoard; Nejadgholi et al.): every gold span is
`correct` (same boundaries and type as a predicted span), `wrong_type` (same boundaries, another type),
`wrong_boundary` (overlapping a predicted span of its type, other boundaries), `wrong_type_boundary` (overlapping
only predicted spans of other types and boundaries) or `missed` (overlapping none); every predicted span that is
no gold span's match is `spurious` when it overlaps no gold span, and otherwise takes the kind of its best overlap.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

OUTSIDE = "O"
SCHEMES = ("auto", "IOB2", "BIO", "IOBES", "plain")  # BIO is another name of IOB2
MODES = ("default", "strict")
KINDS = ("correct", "wrong_type", "wrong_boundary", "wrong_type_boundary", "missed", "spurious")
ERROR_KINDS = KINDS[1:]
PREFIXES = {"IOB2": ("B", "I"), "IOBES": ("B", "I", "E", "S")}

Span = tuple[int, int, str]


def split_tag(tag: str) -> tuple[str, str]:
    """(prefix, type) of a prefixed tag: 'B-PER' -> ('B', 'PER'); 'O' -> ('O', '')."""
    if tag == OUTSIDE:
        return OUTSIDE, ""
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def detect_scheme(labels: Sequence[str], asked: str = "auto") -> str:
    """IOB2, IOBES or plain for a model's labels; ValueError (one line) when they fit no scheme or not `asked`."""
    asked = "IOB2" if asked == "BIO" else asked
    tags = [t for t in labels if t != OUTSIDE]
    prefixes = {split_tag(t)[0] if "-" in t else None for t in tags}
    if None in prefixes:
        found = "plain"
        if len(prefixes) > 1:
            bare = sorted(t for t in tags if "-" not in t)[:3]
            raise ValueError(f"labels mix prefixed tags (B-X) and bare ones ({', '.join(bare)}); expected one "
                             "scheme: IOB2/BIO, IOBES or plain")
    elif prefixes <= set(PREFIXES["IOB2"]):
        found = "IOB2"
    elif prefixes <= set(PREFIXES["IOBES"]):
        found = "IOBES"
    else:
        raise ValueError(f"label prefixes {sorted(prefixes)} are neither IOB2/BIO (B, I) nor IOBES (B, I, E, S)")
    if asked in ("auto", found) or (asked == "IOBES" and found == "IOB2"):
        return found if asked == "auto" else asked
    raise ValueError(f"the labels are in the {found} scheme, not {asked}")


def entity_types(labels: Sequence[str], scheme: str) -> list[str]:
    """The entity types the labels name, sorted ('PER', 'LOC', ...); for plain tags every tag but O."""
    if scheme == "plain":
        return sorted({t for t in labels if t != OUTSIDE})
    return sorted({split_tag(t)[1] for t in labels if t != OUTSIDE})


def spans_of(tags: Sequence[str], scheme: str, mode: str = "default") -> list[Span]:
    """The entity spans of one sentence's tags (see the module's docstring for the two modes)."""
    if scheme == "plain":
        return _plain_spans(tags)
    if mode == "strict":
        return _strict_spans(tags, scheme)
    return _lenient_spans(tags)


def _plain_spans(tags: Sequence[str]) -> list[Span]:
    spans, start = [], 0
    for i in range(1, len(tags) + 1):
        if i == len(tags) or tags[i] != tags[start]:
            if tags[start] != OUTSIDE:
                spans.append((start, i, tags[start]))
            start = i
    return spans


def _lenient_spans(tags: Sequence[str]) -> list[Span]:
    """conlleval's chunking, as seqeval's `get_entities` (a type-less tag 'B' has the type '_')."""
    spans: list[Span] = []
    prev_tag, prev_type, begin = OUTSIDE, "", 0
    for i, chunk in enumerate([*tags, OUTSIDE]):
        tag, kind = chunk[0], chunk[1:].split("-", maxsplit=1)[-1] or "_"
        if _chunk_ends(prev_tag, tag, prev_type, kind):
            spans.append((begin, i, prev_type))
        if _chunk_starts(prev_tag, tag, prev_type, kind):
            begin = i
        prev_tag, prev_type = tag, kind
    return spans


def _chunk_ends(prev_tag: str, tag: str, prev_type: str, kind: str) -> bool:
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", OUTSIDE):
        return True
    return prev_tag not in (OUTSIDE, ".") and prev_type != kind


def _chunk_starts(prev_tag: str, tag: str, prev_type: str, kind: str) -> bool:
    if tag in ("B", "S"):
        return True
    if prev_tag in ("E", "S", OUTSIDE) and tag in ("E", "I"):
        return True
    return tag not in (OUTSIDE, ".") and prev_type != kind


def _strict_spans(tags: Sequence[str], scheme: str) -> list[Span]:
    """Well-formed entities only: IOB2 `B-X I-X*`; IOBES `S-X` or `B-X I-X* E-X` (a broken one is dropped)."""
    parts = [split_tag(t) for t in tags]
    spans: list[Span] = []
    i = 0
    while i < len(parts):
        prefix, kind = parts[i]
        if prefix == "S" and scheme == "IOBES":
            spans.append((i, i + 1, kind))
            i += 1
            continue
        if prefix != "B":
            i += 1
            continue
        end = i + 1
        inside = ("I", "E") if scheme == "IOBES" else ("I",)
        closed = scheme == "IOB2"
        while end < len(parts) and parts[end][0] in inside and parts[end][1] == kind:
            end += 1
            if parts[end - 1][0] == "E":
                closed = True
                break
        if closed:
            spans.append((i, end, kind))
        i = end
    return spans


def encode_spans(n_words: int, spans: Sequence[Span], scheme: str) -> list[str]:
    """Tags for `n_words` words holding `spans` (non-overlapping), in `scheme`."""
    tags = [OUTSIDE] * n_words
    for start, end, kind in spans:
        for i in range(start, end):
            if scheme == "plain":
                tags[i] = kind
            elif scheme == "IOBES" and end - start == 1:
                tags[i] = f"S-{kind}"
            elif i == start:
                tags[i] = f"B-{kind}"
            elif scheme == "IOBES" and i == end - 1:
                tags[i] = f"E-{kind}"
            else:
                tags[i] = f"I-{kind}"
    return tags


# ------------------------------------------------------------------------------------------------ the metrics

def _prf(tp: int, fp: int, fn: int) -> dict:
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": p, "recall": r, "f1": f}


def entity_counts(gold: Sequence[Sequence[Span]], pred: Sequence[Sequence[Span]]) -> dict[str, Counter]:
    """Per type the exact matches (tp), gold spans and predicted spans of some sentences: counts that add up."""
    tp, n_gold, n_pred = Counter(), Counter(), Counter()
    for g, p in zip(gold, pred):
        gs, ps = set(g), set(p)
        for _, _, kind in gs & ps:
            tp[kind] += 1
        n_gold.update(kind for _, _, kind in gs)
        n_pred.update(kind for _, _, kind in ps)
    return {"tp": tp, "gold": n_gold, "pred": n_pred}


def entity_scores(gold: Sequence[Sequence[Span]], pred: Sequence[Sequence[Span]]) -> dict:
    """Entity-level precision, recall, F1 per type (support: gold spans) and their micro, macro and weighted means,
    an entity counting when its boundaries and type are exact (seqeval's definition)."""
    return scores_from_counts(entity_counts(gold, pred))


def scores_from_counts(counts: dict[str, Counter]) -> dict:
    """`entity_scores` from `entity_counts`."""
    tp, n_gold, n_pred = counts["tp"], counts["gold"], counts["pred"]
    types = sorted(set(n_gold) | set(n_pred))
    per_type = {t: {**_prf(tp[t], n_pred[t] - tp[t], n_gold[t] - tp[t]), "support": n_gold[t],
                    "predicted": n_pred[t], "correct": tp[t]} for t in types}
    total_tp, total_gold, total_pred = sum(tp.values()), sum(n_gold.values()), sum(n_pred.values())
    micro = {**_prf(total_tp, total_pred - total_tp, total_gold - total_tp), "support": total_gold}
    scored = [per_type[t] for t in types]
    macro = {m: float(np.mean([s[m] for s in scored])) if scored else 0.0 for m in ("precision", "recall", "f1")}
    weights = np.array([s["support"] for s in scored], dtype=float)
    weighted = {m: float(np.average([s[m] for s in scored], weights=weights)) if weights.sum() else 0.0
                for m in ("precision", "recall", "f1")}
    return {"per_type": per_type, "micro": micro, "macro": {**macro, "support": total_gold},
            "weighted": {**weighted, "support": total_gold}}


def word_type(tag: str, scheme: str) -> str:
    """The entity type a word's tag names ('O' outside), for the token-level confusion."""
    return tag if scheme == "plain" or tag == OUTSIDE else split_tag(tag)[1]


def token_scores(gold_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]], scheme: str,
                 types: Sequence[str]) -> dict:
    """Token (word) accuracy over full tags, and the word-level confusion of entity types, O included
    (rows: gold, columns: predicted)."""
    return token_scores_from_counts(token_counts(gold_tags, pred_tags, scheme, types), types)


def token_counts(gold_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]], scheme: str,
                 types: Sequence[str]) -> dict:
    """The words, the words tagged right and the word-level confusion counts of some sentences."""
    gold = [t for s in gold_tags for t in s]
    pred = [t for s in pred_tags for t in s]
    index = {t: i for i, t in enumerate([*types, OUTSIDE])}
    matrix = np.zeros((len(index), len(index)), dtype=np.int64)
    for g, p in zip(gold, pred):
        matrix[index[word_type(g, scheme)], index[word_type(p, scheme)]] += 1
    return {"n": len(gold), "right": sum(g == p for g, p in zip(gold, pred)), "matrix": matrix}


def token_scores_from_counts(counts: dict, types: Sequence[str]) -> dict:
    n = counts["n"]
    return {"n_words": n, "accuracy": counts["right"] / n if n else 0.0,
            "confusion": {"labels": [*types, OUTSIDE], "matrix": counts["matrix"].tolist()}}


# ------------------------------------------------------------------------------------------------ error spans

def _overlap(a: Span, b: Span) -> int:
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


def _kind(g: Span, p: Span) -> str:
    same_bounds, same_type = g[:2] == p[:2], g[2] == p[2]
    if same_bounds:
        return "correct" if same_type else "wrong_type"
    return "wrong_boundary" if same_type else "wrong_type_boundary"


def _best(span: Span, others: Sequence[Span]) -> int | None:
    """The index of the other span that matches `span` best: exact bounds first, then same type, then overlap."""
    scored = [((o[:2] == span[:2]), (o[2] == span[2]), _overlap(span, o), -k, k)
              for k, o in enumerate(others) if _overlap(span, o)]
    return max(scored)[-1] if scored else None


def classify_spans(gold: Sequence[Span], pred: Sequence[Span]) -> list[dict]:
    """One record per gold span and per predicted span that is no gold span's match: source ('gold'/'pred'),
    start, end, gold_type, pred_type, kind, and the bounds of the span it was matched with (-1 when none)."""
    rows, used = [], set()
    for g in gold:
        k = _best(g, pred)
        if k is None:
            rows.append(_record("gold", g, g[2], None, "missed", None))
            continue
        used.add(k)
        rows.append(_record("gold", g, g[2], pred[k][2], _kind(g, pred[k]), pred[k]))
    for k, p in enumerate(pred):
        if k in used:
            continue
        j = _best(p, gold)
        if j is None:
            rows.append(_record("pred", p, None, p[2], "spurious", None))
        else:
            rows.append(_record("pred", p, gold[j][2], p[2], _kind(gold[j], p), gold[j]))
    return sorted(rows, key=lambda r: (r["start"], r["source"] != "gold", r["end"]))


def _record(source: str, span: Span, gold_type, pred_type, kind: str, other: Span | None) -> dict:
    return {"source": source, "start": span[0], "end": span[1], "gold_type": gold_type, "pred_type": pred_type,
            "kind": kind, "match_start": other[0] if other else -1, "match_end": other[1] if other else -1}


def capitalization(surface: str) -> str:
    """upper, title, lower, mixed or none (no letters): the capitalization feature of a span."""
    letters = [c for c in surface if c.isalpha()]
    if not letters:
        return "none"
    if all(c.isupper() for c in letters):
        return "upper"
    if all(c.islower() for c in letters):
        return "lower"
    words = [w for w in surface.split() if any(c.isalpha() for c in w)]
    if all(w[0].isupper() for w in words if w[0].isalpha()):
        return "title"
    return "mixed"


def error_kind_counts(kinds: Sequence[str]) -> dict:
    """How many spans of each error kind (every kind named, zeros included)."""
    counts = Counter(kinds)
    return {k: int(counts.get(k, 0)) for k in KINDS}


def compute_token_metrics(gold_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]], scheme: str,
                          types: Sequence[str], span_mode: str, kinds: Sequence[str], kind_types: Sequence[str],
                          sentence_correct: Sequence[bool]) -> dict:
    """metrics.json of a token-classification run: entity scores in both modes (the headline in `span_mode`),
    token accuracy and confusion, error-span counts overall and per entity type (`kinds` with the type of each
    span, gold's where it has one), and the share of sentences without an error span."""
    return token_metrics_from_counts(sentence_counts(gold_tags, pred_tags, scheme, types, sentence_correct),
                                     Counter(zip(kind_types, kinds)), scheme, types, span_mode)


def sentence_counts(gold_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]], scheme: str,
                    types: Sequence[str], sentence_correct: Sequence[bool]) -> dict:
    """Every count metrics.json needs from some sentences' tags: counts of the sentences of two blocks add up."""
    ok = np.asarray(sentence_correct, dtype=bool)
    modes = {mode: entity_counts([spans_of(t, scheme, mode) for t in gold_tags],
                                 [spans_of(t, scheme, mode) for t in pred_tags])
             for mode in MODES if not (scheme == "plain" and mode == "strict")}
    return {"n": int(len(ok)), "right": int(ok.sum()), "entities": modes,
            "tokens": token_counts(gold_tags, pred_tags, scheme, types)}


def add_counts(a, b):
    """The counts of `sentence_counts` (or of spans: a Counter) of two sets of sentences together."""
    if isinstance(a, dict) and not isinstance(a, Counter):
        return {key: add_counts(a[key], b[key]) for key in a}
    return a + b


def token_metrics_from_counts(counts: dict, span_kinds: Counter, scheme: str, types: Sequence[str],
                              span_mode: str) -> dict:
    """`compute_token_metrics` from `sentence_counts` and the spans' (type, kind) counts."""
    modes = {mode: scores_from_counts(c) for mode, c in counts["entities"].items()}
    head = modes[span_mode if span_mode in modes else "default"]
    tokens = token_scores_from_counts(counts["tokens"], types)
    n, right = counts["n"], counts["right"]
    per_type_kinds: dict[str, dict] = {}
    for (t, kind), c in span_kinds.items():
        per_type_kinds.setdefault(t, dict.fromkeys(KINDS, 0))[kind] += c
    errors = {k: int(sum(c for (_, kind), c in span_kinds.items() if kind == k)) for k in KINDS}
    overall = {"n": n, "n_failures": n - right, "accuracy": right / n if n else 0.0,
               "sentence_accuracy": right / n if n else 0.0,
               "micro_f1": head["micro"]["f1"], "macro_f1": head["macro"]["f1"],
               "weighted_f1": head["weighted"]["f1"],
               "precision": head["micro"]["precision"], "recall": head["micro"]["recall"],
               "token_accuracy": tokens["accuracy"], "n_words": tokens["n_words"],
               "n_gold_spans": head["micro"]["support"], "n_error_spans": sum(errors[k] for k in ERROR_KINDS),
               "span_mode": span_mode, "scheme": scheme}
    per_class = [{"label": t, **{m: s[m] for m in ("precision", "recall", "f1", "support", "predicted")},
                  "errors": per_type_kinds.get(t, dict.fromkeys(KINDS, 0))}
                 for t, s in head["per_type"].items()]
    return {"task": "token-classification", "overall": overall, "per_class": per_class,
            "entities": modes, "tokens": {"accuracy": tokens["accuracy"], "n_words": tokens["n_words"]},
            "confusion": tokens["confusion"], "error_kinds": errors}
