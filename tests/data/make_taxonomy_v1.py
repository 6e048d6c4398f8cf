"""Make tests/data/taxonomy-v1.json with the real export of erroranalysis 0.1 (taxonomy schema 1).

    git archive 5b393bd erroranalysis tests | tar -x -C /tmp/ea-0.1
    python tests/data/make_taxonomy_v1.py /tmp/ea-0.1 tests/data/taxonomy-v1.json

A synthetic run (tests/ui_fixtures.py, no real texts) with two error types, labeled failures, a suggestion and a flag.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path[:0] = [sys.argv[1], str(Path(sys.argv[1]) / "tests")]
from ui_fixtures import make_run  # noqa: E402

from erroranalysis import stages  # noqa: E402  (0.1's, from the path given)
from erroranalysis.labels import LabelStore  # noqa: E402

work = Path(tempfile.mkdtemp())
run = make_run(work / "news", n=40, n_failures=12, seed=4)
store = LabelStore(work / "labels.sqlite", user="alice")
fails = run.predictions().loc[lambda p: ~p["correct"], "example_id"].tolist()
store.create_error_type("Vocabulary overlap", "Words of another class dominate", "high")
store.create_error_type("Zoë", "a non-ASCII name")
store.assign("news", fails[:6], "Vocabulary overlap")
store.assign("news", fails[6:9], "Zoë")
store.assign("news", fails[9:10], "Zoë", source="suggested")
store.set_flag("news", fails[10:11], "label_wrong")
stages.export_taxonomy(run.path, "json", sys.argv[2], labels_db=store.path)
print(sys.argv[2])
