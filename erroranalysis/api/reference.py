"""The Python API's reference in Markdown, from the docstrings themselves (docs/python-api.md holds it between
markers; a test keeps it current). `python -m erroranalysis.api.reference docs/python-api.md` rewrites it."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

BEGIN, END = "<!-- reference: begin -->", "<!-- reference: end -->"


def _signature(func) -> str:
    """The signature, with a dataclass default shown by its name (`ClusterParams()`), not its every field."""
    import re

    text = re.sub(r"\b(\w+Params)\([^()]*\)", r"\1()", str(inspect.signature(func)))
    return re.sub(r"(: |-> )['\"]([^'\"]*)['\"]", r"\1\2", text)  # annotations unquoted, string defaults not


def _doc(obj) -> str:
    return inspect.cleandoc(obj.__doc__ or "").replace("\n", " ").replace("  ", " ")


def markdown() -> str:
    from erroranalysis import api

    lines = []
    for name in ("analyze", "run", "open", "sft_check"):
        func = getattr(api, name)
        lines += [f"### `ea.{name}{_signature(func)}`", "", _doc(func), ""]
    for cls in (api.Run, api.Metrics, api.Comparison):
        lines += [f"### `ea.{cls.__name__}`", "", _doc(cls), ""]
        for member, value in vars(cls).items():
            if member.startswith("_") and member != "_repr_html_":
                continue
            if isinstance(value, property):
                lines.append(f"- `.{member}`: {_doc(value.fget)}")
            elif callable(value):
                signature = _signature(value).replace("(self, ", "(").replace("(self)", "()")
                lines.append(f"- `.{member}{signature}`: {_doc(value)}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def current(page: str) -> str:
    """`page` with its reference section rebuilt."""
    head, _, rest = page.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n\n{markdown()}\n{END}{tail}"


if __name__ == "__main__":
    target = Path(sys.argv[1])
    target.write_text(current(target.read_text(encoding="utf-8")), encoding="utf-8")
