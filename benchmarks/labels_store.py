"""What a bulk assignment costs in the labels database: bytes per assigned row in the event log and in the file.

One assignment of N examples (ids `100000`, `100001`, ..., 40 clusters) to one error type, as the app's "assign the
cluster" or apply-taxonomy writes it. Prints, per store: the event payload per row, the file's growth per row (after
a WAL checkpoint, so every page is counted) and the seconds the write took; then the seconds to assign the same rows
to another type (each row read, compared and updated) and to undo that. The peer is another version of the store,
run from a checkout of it in a subprocess when `--peer` names one: erroranalysis 0.1 (schema 1, one JSON document
per event), or any earlier commit:

    git archive 5b393bd erroranalysis | tar -x -C /tmp/ea-0.1
    .venv/bin/python benchmarks/labels_store.py [--rows 100000] [--peer /tmp/ea-0.1]

Without --peer, the schema-1 payload of the same changes is computed (the JSON 0.1 stored), not its file growth.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_MEASURE = """
import json, os, sqlite3, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from erroranalysis.labels import LabelStore
n = int(sys.argv[2])
db = Path(tempfile.mkdtemp()) / "labels.sqlite"
store = LabelStore(db, user="alice")
store.create_error_type("T")
def size():
    con = sqlite3.connect(db); con.execute("PRAGMA wal_checkpoint(TRUNCATE)"); con.close()
    return os.path.getsize(db)
start_size = size()
ids = [str(100000 + i) for i in range(n)]
t0 = time.perf_counter()
store.assign("experiments/run-a", ids, "T", cluster_ids={e: k % 40 for k, e in enumerate(ids)})
seconds = time.perf_counter() - t0
grown = size() - start_size
con = sqlite3.connect(db)
payload = con.execute("SELECT LENGTH(payload) FROM events WHERE action = 'assign'").fetchone()[0]
con.close()
store.create_error_type("U")
t0 = time.perf_counter()
store.assign("experiments/run-a", ids, "U")  # every row there already: read, compare, UPDATE
again = time.perf_counter() - t0
t0 = time.perf_counter()
store.undo()  # every row checked, then restored
undo = time.perf_counter() - t0
print(json.dumps({"payload": payload / n, "file": grown / n, "seconds": seconds, "again": again, "undo": undo}))
"""


def measure(code_root: Path, rows: int) -> dict:
    done = subprocess.run([sys.executable, "-c", _MEASURE, str(code_root), str(rows)], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def legacy_payload(rows: int) -> float:
    """The schema-1 JSON of the same changes, per row (computed, for runs without a 0.1 checkout)."""
    sys.path.insert(0, str(ROOT))
    from erroranalysis.labels import LabelStore

    db = Path(tempfile.mkdtemp()) / "labels.sqlite"
    store = LabelStore(db, user="alice")
    store.create_error_type("T")
    ids = [str(100000 + i) for i in range(rows)]
    store.assign("experiments/run-a", ids, "T", cluster_ids={e: k % 40 for k, e in enumerate(ids)})
    (event,) = [e for e in store.events(with_payload=True) if e.action == "assign"]
    return len(json.dumps({"changes": event.payload["changes"]}, separators=(",", ":"))) / rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--peer", type=Path, help="a checkout of erroranalysis 0.1 (schema 1) to compare with")
    args = parser.parse_args()
    ours = measure(ROOT, args.rows)
    print(f"bulk assignment of {args.rows:,} examples (machine shared: times are indicative)")
    print(f"{'store':<28} {'event B/row':>12} {'file B/row':>11} {'new rows s':>10} {'reassign s':>10} "
          f"{'undo s':>7}")
    line = "{:<28} {payload:>12.1f} {file:>11.1f} {seconds:>10.2f} {again:>10.2f} {undo:>7.2f}"
    print(line.format("this version (schema 2)", **ours))
    if args.peer is not None:
        peer = measure(args.peer, args.rows)
        print(line.format(f"peer ({args.peer.name})", **{"again": float("nan"), "undo": float("nan"), **peer}))
        print(f"ratio peer / this: event log {peer['payload'] / ours['payload']:.0f}x, file "
              f"{peer['file'] / ours['file']:.1f}x, time {peer['seconds'] / ours['seconds']:.2f}x"
              + (f", reassign {peer['again'] / ours['again']:.2f}x, undo {peer['undo'] / ours['undo']:.2f}x"
                 if "again" in peer else ""))
    else:
        legacy = legacy_payload(args.rows)
        print(f"{'schema-1 JSON (computed)':<28} {legacy:>12.1f} {'-':>11} {'-':>8}")
        print(f"ratio: event log {legacy / ours['payload']:.0f}x smaller")


if __name__ == "__main__":
    main()
