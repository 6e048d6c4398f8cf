"""Per-row inputs of the output checks: the `schema`, `regex`, `tools` and `checks` cells of a prompt set.

Bad cells (an unknown check name, a schema that is not a valid JSON Schema, a regex that does not compile, a tools
list that is not a list of signatures) are reported by `prepare_columns` as one line naming the file, the line and
the column, before anything runs.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from erroranalysis.core.errors import DataError, ParameterError, where
from erroranalysis.infer.output_checks import CHECKERS


def check_names(names: Iterable[str] | str | None) -> list[str] | None:
    """Validate a --checks value (list or comma-separated string); None when not given."""
    if names is None:
        return None
    try:
        parsed = parse_check_names(names if isinstance(names, str) else list(names))
    except ValueError:
        raise ParameterError("output_checks", names, "check names from: " + ", ".join(CHECKERS)) from None
    return parsed or None


CELL_COLUMNS = ("schema", "regex", "tools", "checks")


def parse_check_names(value: Any) -> list[str] | None:
    """A list of checker names from a list, a JSON list or a comma-separated string; None for an empty cell."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if hasattr(value, "tolist") and not isinstance(value, str):
        value = value.tolist()
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a valid JSON list ({exc.msg})") from None
        else:
            value = [part.strip() for part in text.split(",") if part.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("expected a list of check names")
    unknown = [v for v in value if v not in CHECKERS]
    if unknown:
        raise ValueError(f"unknown check {unknown[0]!r}; known: {', '.join(CHECKERS)}")
    return list(dict.fromkeys(value))


def parse_schema(value: Any) -> Any:
    """A JSON Schema from a dict or JSON text, checked against its metaschema; None for an empty cell."""
    from jsonschema import exceptions, validators

    value = _json_cell(value)
    if value is None:
        return None
    if not isinstance(value, (dict, bool)):
        raise ValueError(f"a JSON Schema is an object, not {type(value).__name__}")
    try:
        validators.validator_for(value).check_schema(value)
    except exceptions.SchemaError as exc:
        at = "/".join(str(p) for p in exc.path)
        raise ValueError(f"not a valid JSON Schema ({exc.message}{' at ' + at if at else ''})") from None
    return value


def parse_tools(value: Any) -> list[dict] | None:
    """Declared tool signatures: a list of {"name", "parameters"} (or OpenAI's {"type": "function", "function":
    {...}}), or an object {name: parameters}; each parameters is a JSON Schema. None for an empty cell."""
    value = _json_cell(value)
    if value is None:
        return None
    if isinstance(value, dict) and not ("name" in value or "function" in value):
        value = [{"name": k, "parameters": v} for k, v in value.items()]
    elif isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ValueError("expected a non-empty list of tool signatures {\"name\", \"parameters\"}")
    tools = []
    for i, tool in enumerate(value):
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
            tool = tool["function"]
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not tool["name"]:
            raise ValueError(f"tool {i} has no 'name'")
        parameters = tool.get("parameters")
        if parameters is not None:
            try:
                parameters = parse_schema(parameters)
            except ValueError as exc:
                raise ValueError(f"tool {tool['name']!r} parameters: {exc}") from None
        tools.append({"name": tool["name"], "parameters": parameters})
    return tools


def parse_regex(value: Any) -> re.Pattern | None:
    if value is None or (isinstance(value, float) and np.isnan(value)) or str(value) == "":
        return None
    try:
        return re.compile(str(value))
    except re.error as exc:
        raise ValueError(f"not a valid regular expression ({exc})") from None


def _json_cell(value: Any) -> Any:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if hasattr(value, "tolist") and not isinstance(value, str):
        value = value.tolist()
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON ({exc.msg} at character {exc.pos})") from None
    return value


_PARSERS = {"schema": parse_schema, "regex": parse_regex, "tools": parse_tools, "checks": parse_check_names}


def prepare_columns(frame: pd.DataFrame, *, source: str, lines: Sequence[int] | None = None,
                    columns: Mapping[str, str] | None = None, regex: str | None = None) -> dict[str, list]:
    """Parse and validate the check input columns of an eval set; one-line DataError naming file, line, column.

    `columns` maps the roles schema, regex, tools, checks to the frame's column names (roles absent from the
    frame are skipped). A global `regex` applies to rows without their own. Returns {role: parsed values}.
    """
    columns = dict(columns or {role: role for role in CELL_COLUMNS})
    parsed: dict[str, list] = {}
    for role, column in columns.items():
        if column not in frame.columns:
            continue
        parse = _PARSERS[role]
        values = []
        for i, cell in enumerate(frame[column].to_numpy(dtype=object)):
            try:
                values.append(parse(cell))
            except ValueError as exc:
                line = int(lines[i]) if lines is not None else i + 1
                raise DataError(f"{where(source, line, column)}: {exc}; fix that cell.") from None
        parsed[role] = values
    if regex is not None:
        try:
            pattern = parse_regex(regex)
        except ValueError as exc:
            raise ParameterError("regex", regex, str(exc).replace("not a valid", "a valid", 1)) from None
        own = parsed.get("regex", [None] * len(frame))
        parsed["regex"] = [p if p is not None else pattern for p in own]
    return parsed
