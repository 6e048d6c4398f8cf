"""Hooks into training: the Trainer callback and checkpoint watching.

    from erroranalysis.integrations import attach, ErrorAnalysisCallback   # a run per evaluation step
    from erroranalysis.integrations import Watcher                          # a run per checkpoint-* folder

Both write `<experiment>/step-NNNNNN` runs through erroranalysis.stages; `erroranalysis timeline` and the app's
Timeline page read them. The callback module imports transformers, so names load on first use.
"""

from __future__ import annotations

_NAMES = {"ErrorAnalysisCallback": "trainer", "attach": "trainer", "step_logs": "trainer",
          "Watcher": "watch", "checkpoint_ready": "watch",
          "IncrementalReducer": "reuse", "MemoryMiniLM": "reuse"}

__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name in _NAMES:
        import importlib

        return getattr(importlib.import_module(f"erroranalysis.integrations.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'erroranalysis.integrations' has no attribute {name!r}")
