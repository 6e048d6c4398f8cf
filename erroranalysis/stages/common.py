"""What the stages that create a run share: loading the eval set, and the manifest's data entry.
"""

from __future__ import annotations

from pathlib import Path

from erroranalysis.data import DataOptions, EvalSet, load_eval_set


def _load(data, opts: DataOptions, required: tuple[str, ...] = ()) -> EvalSet:
    return load_eval_set(data, text_column=opts.text_column, label_column=opts.label_column,
                         id_column=opts.id_column, encoding=opts.encoding, split=opts.split, required=required)


def _data_entry(eval_set: EvalSet) -> dict:
    entry = eval_set.describe()
    entry["path"] = str(Path(entry["path"]).resolve())
    return entry
