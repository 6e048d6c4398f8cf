"""erroranalysis: error analysis and failure clustering for ML and LLM models.

    import erroranalysis as ea
    run = ea.analyze(df, text="text", label="label", pred="pred", out="runs/x")
    run.metrics.per_class

The names below are the Python API (`erroranalysis.api`, docs/python-api.md); they load on first use, so
`import erroranalysis` (and the command line) stays quick.
"""

# The one place the version is written: pyproject.toml reads it from here (tool.setuptools.dynamic).
__version__ = "0.2.0"

# public name -> the module that holds it
_API = {
    "analyze": "erroranalysis.api", "run": "erroranalysis.api", "open": "erroranalysis.api",
    "Run": "erroranalysis.api", "Metrics": "erroranalysis.api", "Comparison": "erroranalysis.api",
    "DataOptions": "erroranalysis.sources.table", "SourceParams": "erroranalysis.sources.generations",
    "GenerationParams": "erroranalysis.infer.generation", "InferParams": "erroranalysis.stages",
    "MetricsParams": "erroranalysis.stages", "CheckParams": "erroranalysis.stages",
    "SliceParams": "erroranalysis.stages", "ClusterParams": "erroranalysis.stages",
    "CompareParams": "erroranalysis.compare", "TrackerParams": "erroranalysis.integrations.trackers",
    "TaskParams": "erroranalysis.tasks",
    "sft_check": "erroranalysis.api", "SftParams": "erroranalysis.sft",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'erroranalysis' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_API))
