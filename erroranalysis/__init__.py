"""erroranalysis: error analysis and failure clustering for ML and LLM models."""

__version__ = "0.1.0"
