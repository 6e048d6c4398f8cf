"""Make tests/data/labels-v1.sqlite with the real labels store of erroranalysis 0.1 (schema 1), as users have it.

    git archive 5b393bd erroranalysis | tar -x -C /tmp/ea-0.1
    python tests/data/make_labels_v1.py /tmp/ea-0.1 tests/data/labels-v1.sqlite

It holds what the migration to schema 2 must carry over: two error types that are one name under Unicode case
folding ("Zoë", "ZOË": SQLite's NOCASE let both in), assignments, a suggestion, flags, a note, an undone change and
a deleted type, all with their schema-1 events (JSON payloads).
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, sys.argv[1])
from erroranalysis.labels import LabelStore  # noqa: E402  (the 0.1 store, from the path given)

out = Path(sys.argv[2])
out.unlink(missing_ok=True)
store = LabelStore(out, user="alice")
store.create_error_type("Zoë", "the name with a lower-case ë", "high")
store.create_error_type("ZOË", "the same name, upper case", "low")
store.create_error_type("Sarcasm", "irony read literally")
store.create_error_type("Scratch")
store.assign("sample", ["1", "2", "3"], "Zoë", cluster_ids={"1": 0, "2": 0, "3": 1})
store.assign("sample", ["4", "5"], "ZOË")
store.assign("sample", ["6", "7", "8"], "Sarcasm", cluster_ids={"6": 2})
store.assign("team/other", ["1"], "Sarcasm", source="suggested")
store.set_flag("sample", ["9"], "label_wrong")
store.set_note("sample", "1", "gold says sport")
store.with_user("bob").assign("sample", ["10"], "Sarcasm")
store.with_user("bob").undo()
store.delete_error_type("Scratch")
con = sqlite3.connect(out)
con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
con.close()
print(out, out.stat().st_size, "bytes")
