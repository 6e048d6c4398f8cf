"""How fast the app renders a large run: 100k examples, 10k failures, 40 confusion pairs, 3k labeled examples.

The run is made by the real stages (tests/ui_fixtures.make_run: `analyze` over planted predictions, then metrics,
checks, slices and clustering, with a fake embedder and PCA in place of MiniLM and UMAP), once, and reused while
the sizes stay the same.

Prints, per page, the time to first render with cold caches (the first visit after `erroranalysis ui` starts: every
artifact read from disk), the first render in a new session while the caches are warm (another visit, another
user), and a rerun in the same session; then the time of a cluster switch and of a labeling action. The peer is
the same app with its caches cleared before every render (what a Streamlit app without st.cache_data costs on
every interaction), shown as a ratio.

Times are server-side script times measured with streamlit.testing.v1.AppTest, in this process: they exclude the
browser drawing the page and the websocket transfer. The map's Plotly payload size is printed as a proxy for the
browser's share.

    .venv/bin/python benchmarks/ui.py [--n 100000] [--failures 10000] [--clusters 40] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "ui"))

PAGES = ["runs", "overview", "confusion", "clusters", "slices", "label", "taxonomy", "checks"]


def build(workdir: Path, n: int, failures: int, clusters: int) -> Path:
    """The synthetic run (reused when already built with the same sizes) and a labels db with 3k labels."""
    from ui_fixtures import make_run

    from erroranalysis import stages
    from erroranalysis.labels import LabelStore
    from erroranalysis.rundir import Run

    stamp = workdir / "sizes.json"
    # "made_by" marks runs made by the stages (ui_fixtures.make_run): an older, hand-written run is rebuilt
    sizes = {"n": n, "failures": failures, "clusters": clusters, "made_by": "stages"}
    run_dir = workdir / "bench"
    if not (stamp.is_file() and json.loads(stamp.read_text()) == sizes and (run_dir / "manifest.json").is_file()):
        shutil.rmtree(workdir, ignore_errors=True)
        t = time.perf_counter()
        make_run(run_dir, n=n, n_failures=failures, n_clusters=clusters, seed=0)
        done = Run.open(run_dir).manifest["stages"]
        print(f"built the run ({n:,} examples) with the stages in {time.perf_counter() - t:.1f} s: "
              + ", ".join(f"{k} {v.get('seconds', 0):.1f} s" for k, v in done.items()))
        stamp.write_text(json.dumps(sizes))
    db = workdir / "labels.sqlite"
    db.unlink(missing_ok=True)
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    store = LabelStore(db, user="bench")
    table = stages.base_table(Run.open(run_dir))
    fail = table[~table["correct"]]
    for i, name in enumerate(["Vocabulary overlap", "Sarcasm", "Negation", "Long input", "Label noise"]):
        store.create_error_type(name, f"benchmark type {i}", ["low", "medium", "high", "critical", "medium"][i])
    labeled = fail[fail["cluster_id"] >= 0].head(3000)
    for i, (_, group) in enumerate(labeled.groupby("cluster_id")):
        store.assign("bench", group["example_id"].tolist(), ["Vocabulary overlap", "Sarcasm", "Negation",
                                                             "Long input", "Label noise"][i % 5])
    return run_dir


def clear_caches() -> None:
    import streamlit as st

    st.cache_data.clear()
    st.cache_resource.clear()


def new_session(run: str = "bench"):
    from streamlit.testing.v1 import AppTest

    from erroranalysis_ui.eaui import state

    at = AppTest.from_file(str(ROOT / "ui" / "app.py"), default_timeout=600)
    at.session_state[state.RUN] = run
    return at


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def check(at) -> None:
    if at.exception:
        raise SystemExit(f"the app raised: {at.exception[0].value}")
    if at.error:
        raise SystemExit(f"the app showed an error: {at.error[0].value}")


def measure_page(page: str, repeat: int) -> dict[str, float]:
    cold, first, rerun = [], [], []
    for _ in range(repeat):
        clear_caches()
        at = new_session()
        at.run()  # the Runs page (the router's default); then the page under test, caches as the Runs page left them
        clear_caches()
        at.switch_page(f"views/{page}.py")
        cold.append(timed(at.run))
        check(at)
        other = new_session()
        other.run()
        other.switch_page(f"views/{page}.py")
        first.append(timed(other.run))
        check(other)
        rerun.append(timed(other.run))
    return {"cold": statistics.median(cold), "first": statistics.median(first), "rerun": statistics.median(rerun)}


def measure_cluster_switch(repeat: int) -> dict[str, float]:
    from erroranalysis_ui.eaui import state

    at = new_session()
    at.run()
    at.switch_page("views/clusters.py").run()
    check(at)
    ids = list(at.dataframe[0].value["cluster_id"])
    warm, naive = [], []
    for i in range(repeat * 2):
        at.selectbox(key=state.CLUSTER).set_value(int(ids[(i + 1) % len(ids)]))
        warm.append(timed(at.run))
        check(at)
    for i in range(repeat):
        at.selectbox(key=state.CLUSTER).set_value(int(ids[(i + 3) % len(ids)]))
        clear_caches()
        naive.append(timed(at.run))
        check(at)
    return {"cached": statistics.median(warm), "uncached": statistics.median(naive)}


def measure_label_action(repeat: int) -> dict:
    """Assigning a whole cluster on the Label page (write + rerender), each click a new cluster so that every one
    writes: the first of the session (the largest cluster), then `repeat` of the next largest and `repeat` of
    median size; per group the median time, the median time spent in LabelStore.assign (the write), in
    stages.patch_labels (the shared table patched) and in garbage collection, and the sizes."""
    import gc
    from unittest import mock

    from erroranalysis import stages
    from erroranalysis.labels import LabelStore
    from erroranalysis_ui.eaui import state

    spent = {"write": 0.0, "patch": 0.0, "gc": 0.0}
    began = [0.0]

    def collecting(phase, info):
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            spent["gc"] += time.perf_counter() - began[0]

    def timer(part, fn):
        def timed_fn(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[part] += time.perf_counter() - start
        return timed_fn

    at = new_session()
    at.run()
    at.switch_page("views/label.py").run()
    check(at)
    n = len(at.selectbox(key=state.LABEL_CLUSTER).options)
    picks = [0, *range(1, 1 + repeat), *range(n // 2, n // 2 + repeat)]  # options are largest first
    clicks = []
    gc.callbacks.append(collecting)
    with mock.patch.object(LabelStore, "assign", timer("write", LabelStore.assign)), \
            mock.patch.object(stages, "patch_labels", timer("patch", stages.patch_labels)):
        for i in picks:
            at.selectbox(key=state.LABEL_CLUSTER).select_index(i)
            at.run()
            btn = next(b for b in at.button if b.label.startswith("Assign whole cluster"))
            size = int(btn.label.rsplit("(", 1)[1].rstrip(")").replace(",", ""))
            btn.click()
            spent.update(write=0.0, patch=0.0, gc=0.0)
            clicks.append({"time": timed(at.run), "size": size, **spent})
            check(at)
    gc.callbacks.remove(collecting)
    groups = {"first": slice(0, 1), "large": slice(1, 1 + repeat), "median": slice(1 + repeat, None)}
    return {name: {**{k: statistics.median(c[k] for c in clicks[g]) for k in ("time", "write", "patch", "gc")},
                   "sizes": [c["size"] for c in clicks[g]]} for name, g in groups.items()}


def click_parts(run_dir: Path) -> list[str]:
    """What the largest cluster's rows cost on the Label page, part by part, beside what the app did before: the
    Arrow bytes its table sends at 20,000 rows and at tables.MAX_ROWS; taking those rows' texts from the columns as
    read (a chunk per row group) and after labeled.one_chunk; the first lookup of its ids in a fresh 1M-row index,
    cold and after labeled._example_ids' warm-up."""
    import pandas as pd
    from streamlit import dataframe_util

    from erroranalysis import stages
    from erroranalysis.rundir import Run
    from erroranalysis_ui.eaui import labeled, tables

    base = stages.base_table(Run.open(run_dir))
    table = stages.attach_labels(base, *stages.label_tables(None, "bench"))
    failed = ~table["correct"].to_numpy(bool)
    largest = table.loc[failed, "cluster_id"].value_counts().index[0]
    pick = failed & (table["cluster_id"] == largest).to_numpy(bool)

    def size(rows) -> int:
        return len(dataframe_util.convert_pandas_df_to_arrow_bytes(tables.display_frame(rows)))

    wide, _ = tables.top_rows(table, pick, None, limit=20_000)
    shown, at = tables.top_rows(table, pick, None)
    lines = [f"the largest cluster ({len(at):,} failures): its table sends {size(wide) / 1e6:.2f} MB of Arrow at "
             f"20,000 rows, {size(shown) / 1e6:.2f} MB at {tables.MAX_ROWS:,}"]
    rows = shown.index.to_numpy()
    chunks = base["text"].array.__arrow_array__().num_chunks
    as_read = timed(lambda: base["text"].iloc[rows])
    combine = timed(lambda: labeled.one_chunk(base))
    one = timed(lambda: base["text"].iloc[rows])
    lines.append(f"taking those {len(rows):,} texts: {as_read * 1e3:.1f} ms from {chunks} chunks, {one * 1e3:.1f} ms "
                 f"from one ({as_read / max(one, 1e-9):.0f}x; combining the chunks once: {combine:.3f} s)")
    ids = table["example_id"].iloc[at].tolist()
    fresh = pd.Index(base["example_id"])
    cold = timed(lambda: fresh.get_indexer(ids))
    warm_index = pd.Index(base["example_id"])
    warm_index.get_indexer(warm_index[:labeled.WARM_LOOKUP])
    warm = timed(lambda: warm_index.get_indexer(ids))
    lines.append(f"first lookup of its ids in a fresh index of {len(base):,}: {cold:.3f} s cold, {warm:.3f} s after "
                 f"the warm-up at load")
    return lines


def script_compile(page: str) -> float:
    """Seconds Streamlit takes to compile app.py and `page` (magic included) with an empty script cache, as AppTest
    does on every run."""
    from streamlit.runtime.scriptrunner.script_cache import ScriptCache

    start = time.perf_counter()
    cache = ScriptCache()
    for script in ("app.py", page):
        cache.get_bytecode(str(ROOT / "ui" / script))
    return time.perf_counter() - start


def map_payload(run_dir: Path) -> tuple[int, int]:
    """(bytes of Plotly JSON, points) of the Clusters page's map, built by the page's own function."""
    import plotly.io

    from erroranalysis_ui.eaui import labeled

    fig = labeled.cluster_map_figure(run_dir, None, highlight=0, show_correct=True)
    points = sum(len(trace.x) for trace in fig.data if trace.x is not None)
    return len(plotly.io.to_json(fig, validate=False)), points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--failures", type=int, default=10_000)
    parser.add_argument("--clusters", type=int, default=40, help="confusion pairs to plant failures on (the "
                        "fixture cycles through 8); the clustering finds its own number of clusters")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-freeze", action="store_true", help="the app without its garbage-collector freeze "
                        "(eaui.memory), to see what the freeze saves")
    parser.add_argument("--workdir", type=Path, default=ROOT / "benchmarks" / "out" / "ui")
    args = parser.parse_args()

    run_dir = build(args.workdir, args.n, args.failures, args.clusters)
    os.environ["ERRORANALYSIS_RUNS"] = str(args.workdir)
    os.environ["ERRORANALYSIS_LABELS_DB"] = str(args.workdir / "labels.sqlite")
    os.environ["ERRORANALYSIS_USER"] = "bench"
    from streamlit import logger as st_logger

    st_logger.set_log_level("error")
    logging.disable(logging.WARNING)  # AppTest outside a server warns on every cache call, from loggers made later

    if args.no_freeze:
        from erroranalysis_ui.eaui import memory

        memory.freeze_after_imports = lambda: None
    new_session().run()  # import Streamlit, Plotly and the app once, outside the timings

    from erroranalysis.rundir import Run, readers

    found = len(readers.read_clusters(Run.open(run_dir)))
    print(f"\nerroranalysis app, {args.n:,} examples, {args.failures:,} failures, {found} clusters found, "
          f"3,000 labeled; median of {args.repeat}; AppTest server-side time\n")
    print(f"{'page':<12} {'first, cold':>12} {'first, cached':>14} {'rerun':>8} {'cold / cached':>14}")
    for page in PAGES:
        m = measure_page(page, args.repeat)
        print(f"{page:<12} {m['cold']:>10.2f} s {m['first']:>12.2f} s {m['rerun']:>6.2f} s "
              f"{m['cold'] / max(m['first'], 1e-9):>13.1f}x")
    s = measure_cluster_switch(args.repeat)
    print(f"\ncluster switch (Clusters page): {s['cached']:.2f} s cached; {s['uncached']:.2f} s with caches cleared "
          f"(an app without st.cache_data): {s['uncached'] / max(s['cached'], 1e-9):.1f}x slower")
    a = measure_label_action(args.repeat)
    print("assign a whole cluster (Label page, write + rerender), a new cluster each click:")
    for name, what in (("first", "first of the session"), ("large", "the next largest clusters"),
                       ("median", "clusters of median size")):
        g = a[name]
        print(f"  {what:<26} {g['time']:.2f} s, of which the store's write {g['write']:.2f} s, the table's patch "
              f"{g['patch']:.2f} s, garbage collection {g['gc']:.3f} s (median; clusters of "
              f"{', '.join(f'{k:,}' for k in g['sizes'])} examples)")
    print(f"  (AppTest compiles the page scripts again on every run, a server once per process: app.py and "
          f"views/label.py take {script_compile('views/label.py'):.2f} s of each Label figure)")
    print("\n".join(["what a large click's parts cost:", *(f"  {line}" for line in click_parts(run_dir))]))
    from erroranalysis_ui.eaui import labeled

    size, points = map_payload(run_dir)
    print(f"map payload: {size / 1e6:.1f} MB of Plotly JSON for {points:,} points (WebGL; failures sampled by "
          f"cluster above {labeled.MAP_FAILURES:,}, correct examples above {labeled.MAP_BACKGROUND:,})")


if __name__ == "__main__":
    main()
