"""What the Trainer callback costs a real fine-tune, beside what a user would otherwise run: the Trainer alone, and
the Trainer with its own `evaluate`.

The sample checkpoint (`make sample`: all-MiniLM-L6-v2 fine-tuned on 160 BBC News articles) is fine-tuned further
on the sample's train split for `--steps` steps (batches of 16, 64 tokens, AdamW, linear decay), three times, each
in its own process with the same seed and data order:

1. `train`: no evaluation;
2. `evaluate`: the Trainer's own evaluation on the validation split, `--evals` times;
3. `callback`: the same evaluations, and `erroranalysis.integrations.attach` analyzing the same split at each one
   (inference with the model in memory, metrics, slices, clusters with the default UMAP reducer, a step run each);
4. `instead`: no Trainer evaluation; the callback analyzes every `steps / evals` steps (`every=`) and logs the
   split's loss itself (`eval_ea/loss`, the same number as the Trainer's `eval_loss`).

Prints each one's wall seconds, the callback's seconds per step (the first pays the embedding model's load, UMAP's
compilation when numba's cache is cold, and the first fit; later steps reuse the eval texts' vectors and the fitted
reducer), its share of the training wall time, and the ratios.

    .venv/bin/python benchmarks/callback.py                    # ~4 minutes on 2 cores
    .venv/bin/python benchmarks/callback.py --steps 100 --evals 2 --reducer pca
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import SAMPLE, load_average, table  # noqa: E402

BATCH, MAX_LENGTH, LR, SEED = 16, 64, 5e-5, 0


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def one(mode: str, steps: int, evals: int, reducer: str, eval_name: str, work: Path) -> dict:
    """One training run in this process; its timings."""
    import torch
    import transformers
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
    )

    transformers.logging.set_verbosity_error()
    torch.manual_seed(SEED)
    checkpoint = SAMPLE / "checkpoint"
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForSequenceClassification.from_pretrained(checkpoint)
    labels = [model.config.id2label[i] for i in range(len(model.config.id2label))]

    def encode(rows):
        enc = tokenizer([r["text"] for r in rows], truncation=True, max_length=MAX_LENGTH)
        return [{"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i],
                 "labels": labels.index(r["label"])} for i, r in enumerate(rows)]

    every = max(1, steps // evals)
    args = TrainingArguments(
        output_dir=str(work / mode), max_steps=steps, per_device_train_batch_size=BATCH, per_device_eval_batch_size=64,
        learning_rate=LR, lr_scheduler_type="linear", warmup_steps=10, logging_steps=10,
        eval_strategy="steps" if mode in ("evaluate", "callback") else "no", eval_steps=every, save_strategy="no", report_to=[],
        seed=SEED, use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=encode(read_rows(SAMPLE / "train.jsonl")),
                      eval_dataset=encode(read_rows(SAMPLE / "validation.jsonl")),
                      data_collator=DataCollatorWithPadding(tokenizer), processing_class=tokenizer)
    callback = None
    if mode in ("callback", "instead"):
        from erroranalysis import stages
        from erroranalysis.data import DataOptions
        from erroranalysis.integrations import attach

        after = stages.AfterParams(checks=None, cluster=stages.ClusterParams(reducer=reducer, layout=reducer))
        callback = attach(trainer, SAMPLE / f"{eval_name}.jsonl", out=work / "runs" / "bench",
                          data=DataOptions(id_column="id"), after=after,
                          infer=stages.InferParams(max_length=MAX_LENGTH, batch_size=64),
                          every=every if mode == "instead" else None)
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    out = {"mode": mode, "wall": wall, "steps": steps}
    if callback is not None:
        cluster = callback.after.cluster
        out.update(callback=callback.seconds, refits=cluster.reducer.refits, reuses=cluster.reducer.reuses,
                   embedded=callback.embedder.misses, remembered=callback.embedder.hits,
                   accuracy=[json.loads((p / "metrics.json").read_text())["overall"]["accuracy"]
                             for p in callback.runs])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--evals", type=int, default=4)
    parser.add_argument("--reducer", default="umap", choices=["umap", "pca"])
    parser.add_argument("--eval-set", default="validation", choices=["validation", "eval"],
                        help="what the callback analyzes: the 200-article validation split (what the Trainer "
                             "evaluates) or the 1,000-article eval set")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not (SAMPLE / ".built").exists():
        raise SystemExit(f"no sample at {SAMPLE}; run `make sample` first")
    if args.one:
        print(json.dumps(one(args.one, args.steps, args.evals, args.reducer, args.eval_set, args.work)))
        return
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("train", "evaluate", "callback", "instead"):
            proc = subprocess.run([sys.executable, __file__, "--one", mode, "--steps", str(args.steps), "--evals",
                                   str(args.evals), "--reducer", args.reducer, "--eval-set", args.eval_set,
                                   "--work", tmp], capture_output=True, text=True)
            if proc.returncode:
                raise SystemExit(f"{mode} failed:\n{proc.stderr[-3000:]}")
            results[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    base, ev, cb = results["train"]["wall"], results["evaluate"]["wall"], results["callback"]["wall"]
    inst = results["instead"]["wall"]
    spent, spent_inst = sum(results["callback"]["callback"]), sum(results["instead"]["callback"])
    print(f"Fine-tuning the sample checkpoint: {args.steps} steps of {BATCH} x {MAX_LENGTH} tokens, "
          f"{args.evals} evaluations on the 200-article validation split; the callback analyzes the {args.eval_set} "
          f"split with reducer {args.reducer}; {load_average()} (shared machine: ratios, one run each).")
    rows = [["Trainer, no evaluation", f"{base:.1f}", "1.00x", "-", "-"],
            ["Trainer + its own evaluate", f"{ev:.1f}", f"{ev / base:.2f}x", "1.00x", "-"],
            ["Trainer + evaluate + erroranalysis callback", f"{cb:.1f}", f"{cb / base:.2f}x", f"{cb / ev:.2f}x",
             f"{spent:.1f} s = {spent / cb:.0%} of wall"],
            ["Trainer + erroranalysis callback instead of evaluate", f"{inst:.1f}", f"{inst / base:.2f}x",
             f"{inst / ev:.2f}x", f"{spent_inst:.1f} s = {spent_inst / inst:.0%} of wall"]]
    print(table(rows, ["run", "wall s", "vs train", "vs evaluate", "callback"]))
    r = results["callback"]
    print("callback seconds per analyzed step: " + ", ".join(f"{s:.1f}" for s in r["callback"])
          + f" (first {r['callback'][0]:.1f}, later mean "
            f"{sum(r['callback'][1:]) / max(1, len(r['callback']) - 1):.1f})")
    print(f"reused across steps: reducer fitted {r['refits']}x, reused {r['reuses']}x; eval texts embedded "
          f"{r['embedded']:,}, taken from memory {r['remembered']:,}; accuracy per step "
          + ", ".join(f"{a:.3f}" for a in r["accuracy"]))


if __name__ == "__main__":
    main()
