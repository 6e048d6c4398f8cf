"""The HTML report's size with the plotly.js bundle it inlines (the cartesian partial bundle) beside the full bundle a
plain `fig.to_html(include_plotlyjs=True)` page would carry, on a run of N rows made by `erroranalysis analyze` from
the sample's eval set (predictions drawn at random, every stage but clustering).

    .venv/bin/python benchmarks/report_size.py --n 60
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

MIB = 1 << 20


def make_run(folder: Path, n: int, sample: Path) -> Path:
    rows = [json.loads(line) for line in (sample / "eval.jsonl").read_text().splitlines()[:n]]
    labels = sorted({r["label"] for r in rows})
    rng = random.Random(0)
    for r in rows:
        r["pred"] = r["label"] if rng.random() < 0.7 else rng.choice(labels)
    data = folder / "predictions.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    exe = Path(sys.executable).with_name("erroranalysis")
    subprocess.run([str(exe), "analyze", "-p", str(data), "--id-column", "id", "--out", str(folder / "run"),
                    "--no-cluster"], check=True, capture_output=True)
    return folder / "run"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--sample", default=os.environ.get("ERRORANALYSIS_SAMPLE",
                                                           str(Path.home() / ".cache/erroranalysis/sample")))
    args = parser.parse_args()
    from plotly.offline import get_plotlyjs

    from erroranalysis.report import page
    from erroranalysis.report.run_page import render_run
    from erroranalysis.stages import run_document

    with tempfile.TemporaryDirectory() as tmp:
        doc = run_document(make_run(Path(tmp), args.n, Path(args.sample)))
        shipped = render_run(doc)
        full_page = shipped.replace(page.plotly_js(), get_plotlyjs())
    partial, full = len(shipped.encode()), len(full_page.encode())
    print(f"report of a {args.n}-row run: {partial / MIB:.2f} MiB with the cartesian bundle, {full / MIB:.2f} MiB "
          f"with plotly's full bundle ({full / partial:.2f}x); scripts {len(page.plotly_js().encode()) / MIB:.2f} vs "
          f"{len(get_plotlyjs().encode()) / MIB:.2f} MiB")


if __name__ == "__main__":
    main()
