"""One table from the library's parameter names to the flags users type, so a bad value is reported by its flag.

A library `ParameterError` carries the parameter's name; `message(exc)` says `--top 0 is invalid: ...` rather than
`top_k=0 is invalid: ...`. A parameter not in the table is spelled as its flag by rule (`max_fit` -> `--max-fit`).
"""

from __future__ import annotations

FLAGS = {
    "top_k": "--top",
    "n_components": "--components",
    "n_neighbors": "--neighbors",
    "n_keywords": "--keywords",
    "n_exemplars": "--exemplars",
    "n_resamples": "--resamples",
    "label_issue_method": "--label-issue-method",
    "near_threshold": "--near-threshold",
}


def flag(param: str) -> str:
    """The flag that sets `param`."""
    if param.startswith("-"):
        return param
    return FLAGS.get(param, "--" + param.replace("_", "-"))


def message(exc) -> str:
    """A ParameterError's one line, naming the flag."""
    return f"{flag(exc.param)} {exc.value!r} is invalid: expected {exc.expected}."
