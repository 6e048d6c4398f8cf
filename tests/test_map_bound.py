"""The cluster map never ships more than a bounded number of points to the browser, whatever the run's size.

The cluster stage places every failure on the 2-D layout (assignments.parquet x, y), and the app's map draws the
failing points it reads: at 1M examples / 200k failures that would be 200k WebGL points (~60 MB of Plotly JSON).
The app draws at most MAP_FAILURES failing points (a sample by cluster that keeps every cluster visible) and
MAP_BACKGROUND correct ones behind them. The bounds are lowered here so that a run the stages build in seconds
goes over them.
"""

from __future__ import annotations

from ui_fixtures import make_run


def test_the_map_ships_a_bounded_number_of_points_and_every_cluster(tmp_path, monkeypatch):
    from erroranalysis_ui.eaui import labeled

    run = make_run(tmp_path / "run", n=1500, n_failures=900, n_clusters=8, with_checks=False, with_slices=False)
    full = labeled._cluster_map_base(str(run.path), ("full",), True)
    clusters = {trace["meta"] for trace in full["data"] if trace.get("name") != "correct"}
    assert sum(len(t["x"]) for t in full["data"] if t.get("name") != "correct") == 900  # under the bound: all

    monkeypatch.setattr(labeled, "MAP_FAILURES", 300)
    monkeypatch.setattr(labeled, "MAP_BACKGROUND", 100)
    monkeypatch.setattr(labeled, "MAP_PER_CLUSTER", 10)
    bounded = labeled._cluster_map_base(str(run.path), ("bounded",), True)
    failing = [trace for trace in bounded["data"] if trace.get("name") != "correct"]
    background = [trace for trace in bounded["data"] if trace.get("name") == "correct"]
    assert sum(len(trace["x"]) for trace in failing) <= 300
    assert sum(len(trace["x"]) for trace in background) <= 100
    assert {trace["meta"] for trace in failing} == clusters  # a sample that still shows every cluster
    assert all(len(trace["x"]) >= min(10, len(next(t for t in full["data"] if t.get("meta") == trace["meta"])["x"]))
               for trace in failing)
