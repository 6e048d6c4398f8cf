"""Importing torch and transformers' model code: some 600,000 objects the garbage collector tracks, which live until
the process exits."""

from __future__ import annotations

import gc
import sys

# Whether the import also freezes what exists (gc.freeze): set by the `erroranalysis` command, whose process ends
# with its command. Off for a library user (a notebook, a Ray worker, tests), whose other objects it would freeze too.
FREEZE = False


def import_model_libraries() -> None:
    """Import torch and transformers' model code with the cyclic garbage collector paused; with FREEZE, then freeze
    what exists.

    Left running, the collector starts a full collection each time the objects these imports make grow by a
    quarter, each over everything imported so far: `benchmarks/startup.py` prints 6 of them, 0.46 s collecting,
    against none paused (0.19 s then, in collections the libraries ask for themselves).
    Frozen, later collections and the one at exit skip these objects. The price of freezing: the ~9,000 objects the
    imports leave unreachable (about 7 MB) stay until exit, since collecting them first would cost 0.2 s. Runs once
    per process; afterwards it is a dict lookup."""
    if "transformers.modeling_utils" in sys.modules:
        return
    enabled = gc.isenabled()
    gc.disable()
    try:
        import torch  # noqa: F401
        import transformers.modeling_utils  # noqa: F401
        if FREEZE:
            gc.freeze()
    finally:
        if enabled:
            gc.enable()


class quiet_transformers:
    """transformers' warnings and "Loading weights" bars off while a model loads, and back as they were after:
    a local checkpoint's load says nothing a user can act on, but the user's own transformers logging is theirs."""

    def __enter__(self):
        from transformers.utils import logging as hf_logging

        self.level, self.bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        return self

    def __exit__(self, *exc) -> bool:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity(self.level)
        if self.bar:
            hf_logging.enable_progress_bar()
        return False
