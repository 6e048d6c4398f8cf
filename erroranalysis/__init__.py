"""erroranalysis: error analysis and failure clustering for ML and LLM models."""

# The one place the version is written: pyproject.toml reads it from here (tool.setuptools.dynamic).
__version__ = "0.2.0"
