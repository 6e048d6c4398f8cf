"""erroranalysis: error analysis and failure clustering for ML and LLM models."""

__version__ = "0.2.0"

from erroranalysis import _compat  # noqa: E402  (old import paths, for one release)

_compat.install()
