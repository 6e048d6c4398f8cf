"""The server process's garbage collector: objects that live as long as the process are kept out of its full
collections."""

from __future__ import annotations

import gc
import sys

_modules_when_frozen = 0


def freeze_after_imports() -> None:
    """After a page run that imported modules (a page's first visit in this process, or a first use of a module),
    collect, then `gc.freeze` what is left.

    A full collection walks every object the imports made (streamlit, pandas, pyarrow, plotly): measured on the
    1M-example benchmark run, one such collection of 44 ms in every labeling click; frozen, it walks what came
    after (3 ms). This runs at most once per run that imported something new, a few times per process. The price:
    an object alive at a freeze that later ends up in a reference cycle (a session open then, and closed later)
    stays until the process exits."""
    global _modules_when_frozen
    if len(sys.modules) > _modules_when_frozen:
        _modules_when_frozen = len(sys.modules)
        gc.collect()
        gc.freeze()
