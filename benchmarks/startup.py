"""Where a process's start-up and exit go when it loads a checkpoint: the figures docs/benchmarks.md ("Inference")
quotes for `libraries.import_model_libraries` and the CLI's freeze before exit.

Each figure is from fresh processes (the median of `--repeat`), beside what a plain `import` would cost:

- full garbage collections while torch and transformers.modeling_utils import, and their seconds: a plain import
  against `import_model_libraries()`;
- seconds from a process's last statement to its end (what Python's exit costs) after importing torch,
  transformers' BERT and pandas: plainly, with the imports frozen, and with a final `gc.freeze()` as well.

    .venv/bin/python benchmarks/startup.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time

from common import ROOT, load_average, python, table

COLLECTIONS = """
import gc, json, sys, time
from erroranalysis.core import libraries
full, spent, start = [], [0.0], [0.0]
def watch(phase, info):
    if phase == "start":
        start[0] = time.perf_counter()
    else:
        spent[0] += time.perf_counter() - start[0]
        full.append(info["generation"] == 2)
gc.callbacks.append(watch)
t = time.perf_counter()
if sys.argv[1] == "plain":
    import torch, transformers.modeling_utils
else:
    libraries.import_model_libraries()
print(json.dumps({"full": sum(full), "gc_s": spent[0], "import_s": time.perf_counter() - t}))
"""

EXIT = """
import gc, sys, time
from erroranalysis.core import libraries
if sys.argv[1] != "plain":
    libraries.FREEZE = True
    libraries.import_model_libraries()
import torch, transformers.modeling_utils, transformers.models.bert.modeling_bert, pandas
if sys.argv[1] == "frozen + final freeze":
    gc.freeze()
print(time.time(), flush=True)
"""


def child(script: str, *args: str) -> str:
    return subprocess.run([python(), "-c", script, *args], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout


def exit_seconds(mode: str) -> float:
    proc = subprocess.Popen([python(), "-c", EXIT, mode], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    last = float(proc.stdout.readline())
    proc.wait()
    return time.time() - last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"fresh processes, median of {args.repeat}, {load_average()}\n")

    rows = []
    for mode in ("plain", "import_model_libraries"):
        runs = [json.loads(child(COLLECTIONS, mode)) for _ in range(args.repeat)]
        rows.append([mode, f"{statistics.median(r['full'] for r in runs):.0f}",
                     f"{statistics.median(r['gc_s'] for r in runs):.2f}",
                     f"{statistics.median(r['import_s'] for r in runs):.2f}"])
    print("importing torch and transformers.modeling_utils")
    print(table(rows, ["", "full collections", "s collecting", "s importing"]))

    rows, base = [], None
    for mode in ("plain", "frozen at import", "frozen + final freeze"):
        s = statistics.median(exit_seconds(mode) for _ in range(args.repeat))
        base = base or s
        rows.append([mode, f"{s:.2f}", f"{base / s:.1f}x"])
    print("\nexit, after importing torch, transformers' BERT and pandas")
    print(table(rows, ["", "s from the last statement to the end", "vs plain"]))


if __name__ == "__main__":
    main()
