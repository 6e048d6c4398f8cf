"""The baseline a user would otherwise write: transformers' text-classification pipeline over a JSONL file.

Usage: pipeline_baseline.py MODEL DATA.jsonl OUT.jsonl MAX_LENGTH
"""

import json
import sys

from transformers import pipeline

model, data, out, max_length = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
texts = [json.loads(line)["text"] for line in open(data, encoding="utf-8")]
classify = pipeline("text-classification", model=model, device="cpu")
results = classify(texts, batch_size=32, truncation=True, max_length=max_length)
with open(out, "w", encoding="utf-8") as f:
    for r in results:
        f.write(json.dumps({"pred": r["label"], "score": r["score"]}) + "\n")
