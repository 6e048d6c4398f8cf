"""Old import paths (`erroranalysis.runs`, `erroranalysis.cluster_stage`, ...) keep working for one release.

The flat modules of version 0.1 were regrouped into packages named for the pipeline (docs/development.md). Importing
an old module returns a stand-in that finds each name in its new home and warns once, so users' scripts keep
running while they move to the new paths. Remove this module, and its finder in `erroranalysis/__init__.py`, in the
release after next.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

# old module -> the modules its names now live in, searched in order
MOVED = {
    "runs": ("rundir",),
    "inference": ("infer.classifier", "infer.predictions"),
    "generation": ("infer.generation", "infer.causal_lm"),
    "checkers": ("infer.output_checks", "infer.output_cells"),
    "clustering": ("cluster", "cluster._fit", "cluster._reduce", "cluster._neighbors"),
    "naming": ("cluster._naming",),
    "training": ("checklist.training", "checklist.training_log", "findings"),
    "overfit": ("checklist.overfit", "checklist.overfit_diagnosis"),
    "doctor": ("stages.doctor", "checklist.doctor_report"),
    "taxonomy": ("labels.taxonomy", "stages.export", "rundir"),
    "taxonomy_apply": ("stages.suggestions", "labels.importing", "labels.matching"),
    "pipeline": ("stages.infer", "stages.load_predictions", "stages.metrics", "stages.after", "data"),
    "generation_pipeline": ("stages.generate", "metrics.generation"),
    "checks_stage": ("stages.checks", "datachecks.findings"),
    "cluster_stage": ("stages.cluster",),
    "slice_stage": ("stages.slices",),
    "label_issues": ("datachecks.label_issues",),
    "duplicates": ("datachecks.duplicates",),
    "shift": ("datachecks.shift",),
}
# names that changed as well as moved: old module -> {old name: "new.module:new_name"}
RENAMED = {
    "doctor": {"doctor": "stages.doctor:run_doctor"},
    "taxonomy": {"export": "stages.export:export_taxonomy"},
}


def _find(old: str, name: str):
    if name in RENAMED.get(old, {}):
        module, _, attr = RENAMED[old][name].partition(":")
        return getattr(importlib.import_module(f"erroranalysis.{module}"), attr)
    for module in MOVED[old]:
        target = importlib.import_module(f"erroranalysis.{module}")
        if hasattr(target, name):
            return getattr(target, name)
    raise AttributeError(f"module 'erroranalysis.{old}' has no attribute {name!r} (it moved to "
                         f"{', '.join('erroranalysis.' + m for m in MOVED[old])})")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        prefix, _, old = fullname.partition(".")
        if prefix == "erroranalysis" and old in MOVED:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        old = spec.name.split(".", 1)[1]
        module = types.ModuleType(spec.name, f"Deprecated: moved to {', '.join(MOVED[old])}.")
        module.__getattr__ = lambda name: _find(old, name)
        return module

    def exec_module(self, module):
        new = ", ".join("erroranalysis." + m for m in MOVED[module.__name__.split(".", 1)[1]])
        warnings.warn(f"{module.__name__} is deprecated; import from {new} instead.", DeprecationWarning,
                      stacklevel=2)


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())


def moved_attribute(module: str, name: str, new: str):
    """For a module's `__getattr__`: a name that moved out of it to `new` ("pkg.module:name"), with a warning."""
    target, _, attr = new.partition(":")
    warnings.warn(f"erroranalysis.{module}.{name} is deprecated; use erroranalysis.{target}.{attr or name}.",
                  DeprecationWarning, stacklevel=3)
    return getattr(importlib.import_module(f"erroranalysis.{target}"), attr or name)
