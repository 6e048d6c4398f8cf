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

Prints each one's wall and CPU seconds (all threads: they stay comparable when other jobs share the machine),
the callback's seconds per analyzed step (the first pays the embedding model's load and the first fits; later ones
reuse the eval texts' vectors, and the fitted reducer while the failures barely change), its share of the
training's wall and CPU time, and the ratios.

    .venv/bin/python benchmarks/callback.py                       # 4 fine-tunes of 200 steps: ~30 min on 2 cores
    .venv/bin/python benchmarks/callback.py --eval-set eval       # the callback analyzes the 1,000-article eval set
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
        from erroranalysis.integrations import attach
        from erroranalysis.sources.table import DataOptions

        after = stages.AfterParams(checks=None, cluster=stages.ClusterParams(reducer=reducer, layout=reducer))
        callback = attach(trainer, SAMPLE / f"{eval_name}.jsonl", out=work / "runs" / "bench",
                          data=DataOptions(id_column="id"), after=after,
                          infer=stages.InferParams(max_length=MAX_LENGTH, batch_size=64),
                          every=every if mode == "instead" else None)
        cpu_spent = []
        analyze = callback.analyze

        def timed(*a, **k):  # the process's CPU seconds (all threads) in each analysis
            before = time.process_time()
            analyze(*a, **k)
            cpu_spent.append(time.process_time() - before)

        callback.analyze = timed
    start, cpu = time.perf_counter(), time.process_time()
    trainer.train()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    out = {"mode": mode, "wall": wall, "cpu": cpu, "steps": steps}
    if callback is not None:
        cluster = callback.after.cluster
        out.update(callback=callback.seconds, callback_cpu=cpu_spent, refits=cluster.reducer.refits,
                   reuses=cluster.reducer.reuses,
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
    print(f"Fine-tuning the sample checkpoint: {args.steps} steps of {BATCH} x {MAX_LENGTH} tokens, "
          f"{args.evals} evaluations on the 200-article validation split; the callback analyzes the {args.eval_set} "
          f"split with reducer {args.reducer}; {load_average()} at the end (a shared machine: CPU seconds, all "
          "threads, stay comparable when the load changes; one run each).")
    base = results["train"]
    rows = []
    for mode, title in (("train", "Trainer, no evaluation"), ("evaluate", "Trainer + its own evaluate"),
                        ("callback", "Trainer + evaluate + erroranalysis callback"),
                        ("instead", "Trainer + erroranalysis callback instead of evaluate")):
        r = results[mode]
        share = (f"{sum(r['callback']):.1f} s wall ({sum(r['callback']) / r['wall']:.0%}), "
                 f"{sum(r['callback_cpu']):.1f} s CPU ({sum(r['callback_cpu']) / r['cpu']:.0%})"
                 if "callback" in r else "-")
        rows.append([title, f"{r['wall']:.1f}", f"{r['cpu']:.1f}", f"{r['cpu'] / base['cpu']:.2f}x",
                     f"{r['cpu'] / results['evaluate']['cpu']:.2f}x" if mode != "train" else "-", share])
    print(table(rows, ["run", "wall s", "CPU s", "CPU vs train", "CPU vs evaluate", "callback (share)"]))
    r = results["callback"]
    print("callback seconds per analyzed step, wall: " + ", ".join(f"{s:.1f}" for s in r["callback"])
          + "; CPU: " + ", ".join(f"{s:.1f}" for s in r["callback_cpu"]))
    print(f"reused across steps: reducer fitted {r['refits']}x, reused {r['reuses']}x; eval texts embedded "
          f"{r['embedded']:,}, taken from memory {r['remembered']:,}; accuracy per step "
          + ", ".join(f"{a:.3f}" for a in r["accuracy"]))


if __name__ == "__main__":
    main()
