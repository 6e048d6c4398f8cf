"""How deep a taxonomy document may go, checked before anything is built from it.

A taxonomy is a shallow document (error types with a parent each, a few lists inside), but it may come from anyone:
one nested 200,000 levels deep, or a 1,200-type parent chain, would otherwise end in Python's RecursionError, after
a labels database was created for it. JSON nesting is bounded by MAX_NESTING and parent chains by MAX_DEPTH, each
refused with one line naming the document and the place; nothing is written before these checks pass.
"""

from __future__ import annotations

import json
from typing import Any

from erroranalysis.core.errors import DataError
from erroranalysis.labels.fields import fold_name

MAX_DEPTH = 16  # levels of error types, a top-level type included (docs/taxonomy.md: two are usual)
MAX_NESTING = 32  # levels of JSON objects and lists in a taxonomy document (a valid one has 7)


def parse(text: str | bytes, source: str) -> Any:
    """The JSON document in `text`, refused (DataError naming `source`) when it is not JSON or nests deeper than
    MAX_NESTING levels."""
    try:
        doc = json.loads(text)
    except RecursionError:
        raise DataError(f"{source}: nested deeper than {MAX_NESTING} levels; a taxonomy export nests 7, so this is "
                        "not one: export it again with 'erroranalysis export RUN --format json'.") from None
    except UnicodeDecodeError:
        raise DataError(f"{source}: not UTF-8 text; pass a taxonomy JSON export "
                        "('erroranalysis export RUN --format json').") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{source}, line {exc.lineno}: not valid JSON ({exc.msg}).") from None
    check_nesting(doc, source)
    return doc


def check_nesting(doc: Any, source: str) -> None:
    """Refuse a document nested deeper than MAX_NESTING levels (walked without recursion)."""
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > MAX_NESTING:
                    raise DataError(f"{source}: nested deeper than {MAX_NESTING} levels; a taxonomy export nests 7, "
                                    "so this is not one: export it again with 'erroranalysis export RUN --format "
                                    "json'.")
                stack.append((child, depth + 1))


def check_parents(doc: dict, source: str) -> None:
    """Each parent names another type of the document, following parents never comes back to a type, and no chain
    is longer than MAX_DEPTH types."""
    types = {fold_name(t["name"]): t for t in doc["error_types"]}
    for i, t in enumerate(doc["error_types"]):
        seen, here = {fold_name(t["name"])}, t
        while here.get("parent") is not None:
            key = fold_name(here["parent"])
            if key not in types:
                raise DataError(f"{source}: error_types/{i}/parent: {here['parent']!r} (parent of "
                                f"{here['name']!r}) is not one of the error types; export the taxonomy again.")
            if key in seen:
                raise DataError(f"{source}: error_types/{i}/parent: error type {t['name']!r} is its own ancestor "
                                "(parents make a cycle); fix the parents and import again.")
            seen.add(key)
            if len(seen) > MAX_DEPTH:
                raise DataError(f"{source}: error_types/{i}/parent: error type {t['name']!r} lies more than "
                                f"{MAX_DEPTH} levels deep (a taxonomy has at most {MAX_DEPTH}: "
                                "erroranalysis.labels.MAX_DEPTH); flatten its parents and import again.")
            here = types[key]
