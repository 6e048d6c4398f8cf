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

# Public import paths that 0.3 moved (docs up to 0.2 showed `from erroranalysis.data import DataOptions`): they
# still import, for one release, with a DeprecationWarning naming the new place. 0.4 removes them.
_MOVED = {"erroranalysis.data": "erroranalysis.sources.table",
          "erroranalysis.generations": "erroranalysis.sources.generations"}


class _MovedModules:
    """Finds a moved module's old name and answers with the module at its new place (the same object)."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name not in _MOVED:
            return None
        import importlib.util

        return importlib.util.spec_from_loader(name, cls())

    def create_module(self, spec):
        import importlib
        import warnings

        warnings.warn(f"{spec.name} moved to {_MOVED[spec.name]} in erroranalysis 0.3 (the names the Python API "
                      "exports are also `erroranalysis.<Name>`); the old path goes in 0.4.", DeprecationWarning,
                      stacklevel=2)
        return importlib.import_module(_MOVED[spec.name])

    def exec_module(self, module) -> None:
        pass


def _install_moved_finder() -> None:
    import sys

    if not any(isinstance(f, type) and f.__name__ == "_MovedModules" for f in sys.meta_path):
        sys.meta_path.append(_MovedModules)


_install_moved_finder()


def __getattr__(name: str):
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'erroranalysis' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_API))
