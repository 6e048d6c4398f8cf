"""The server process's garbage collector: objects that live as long as the process are kept out of its full
collections."""

from __future__ import annotations

import gc
import sys

_modules_when_frozen = 0


def freeze_after_imports() -> None:
    """After a page run that imported modules (a page's first visit in this process, or a first use of a module),
    collect, then `gc.freeze` what is left.

    A full collection walks every object the imports made (streamlit, pandas, pyarrow, plotly); frozen, it walks
    what came after. `benchmarks/ui.py` at 1M examples prints garbage collection taking 0.034 s of the largest
    labeling click, 0.083 s with this freeze off (`--no-freeze`). This runs at most once per run that imported
    something new, a few times per process. The price:
    an object alive at a freeze that later ends up in a reference cycle (a session open then, and closed later)
    stays until the process exits."""
    global _modules_when_frozen
    if len(sys.modules) > _modules_when_frozen:
        _modules_when_frozen = len(sys.modules)
        gc.collect()
        gc.freeze()
