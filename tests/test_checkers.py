"""The checker registry: each checker on outputs that pass and fail, label extraction, input-cell validation."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from erroranalysis.core.errors import DataError, ParameterError
from erroranalysis.infer import output_cells, output_checks
from erroranalysis.infer.output_cells import parse_check_names, parse_regex, parse_schema, parse_tools, prepare_columns
from erroranalysis.infer.output_checks import (
    CHECKERS,
    UNPARSEABLE,
    CheckContext,
    default_checks,
    extract_json,
    extract_label,
    normalize,
    parse_tool_call,
    run_checks,
)

LABELS = ["business", "sport", "tech"]
SCHEMA = {"type": "object", "properties": {"label": {"type": "string", "enum": LABELS}}, "required": ["label"],
          "additionalProperties": False}
TOOLS = [{"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                "required": ["city"]}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]


def check(name, output, **row):
    return CHECKERS[name].func(output, row, CheckContext(labels=LABELS))


def test_registry_names():
    assert list(CHECKERS) == ["exact", "normalized", "label", "json", "json_schema", "regex", "tool_call",
                              "contains", "token_f1", "rouge_l", "numeric", "judge"]  # the last five: scorers.py


def test_exact():
    assert check("exact", "  Paris\n", reference="Paris") == (True, "")
    ok, why = check("exact", "paris.", reference="Paris")
    assert not ok and why.startswith("exact: differs only in case")
    assert check("exact", "London", reference="Paris")[0] is False
    assert check("exact", "x", reference=None) == (None, "")


def test_normalized():
    assert normalize("The  Eiffel-Tower!") == "eiffeltower"
    assert check("normalized", "the PARIS.", reference="Paris")[0] is True
    ok, why = check("normalized", "It is Paris, France", reference="Paris")
    assert not ok and "contains the reference" in why
    assert check("normalized", "  ", reference="Paris")[1] == "normalized: empty output"


@pytest.mark.parametrize("output, expected", [
    ('{"label": "Sport"}', "sport"),
    ('```json\n{"label": "tech"}\n```', "tech"),
    ('Sure! {"label": "business"} hope it helps', "business"),
    ('"tech"', "tech"),
    ('{"category": "sport"}', "sport"),
    ("Tech.", "tech"),
    ("This article is about sport.", "sport"),
])
def test_extract_label(output, expected):
    assert extract_label(output, LABELS) == (expected, "")


@pytest.mark.parametrize("output, why", [
    ('{"label": "technology"}', "'technology' is not an allowed label"),
    ("business or tech, hard to say", "several labels"),
    ("no idea", "no allowed label"),
    ('{"label": 3}', "not a string"),
    ("sportsman of the year", "no allowed label"),  # whole words only
])
def test_extract_label_unparseable(output, why):
    label, reason = extract_label(output, LABELS)
    assert label is None and why in reason


def test_label_check_reasons():
    assert check("label", '{"label": "sport"}', label="sport") == (True, "")
    assert check("label", '{"label": "tech"}', label="sport") == (False, "label: wrong label ('tech' for 'sport')")
    ok, why = check("label", "dunno", label="sport")
    assert not ok and why.startswith(f"label: {UNPARSEABLE}")


def test_extract_json():
    assert extract_json(' {"a": 1} ') == ({"a": 1}, "strict", "")
    assert extract_json("```\n[1, 2]\n```")[:2] == ([1, 2], "fenced")
    assert extract_json('Answer: {"a": 1} done')[:2] == ({"a": 1}, "embedded")
    value, how, error = extract_json('{"a": 1')
    assert value is None and how == "none" and "character" in error
    assert extract_json("") == (None, "none", "empty output")


def test_json_check_categories():
    assert check("json", '{"label": "tech"}') == (True, "")
    assert check("json", '```json\n{"label": "tech"}\n```') == (False, "json: wrapped in a code fence")
    assert check("json", 'Here: {"label": "tech"}') == (False, "json: extra text around the JSON")
    assert check("json", "") == (False, "json: empty output")
    ok, why = check("json", "{'label': 'tech'}")
    assert not ok and why.startswith("json: not valid JSON (")


def test_json_schema_check():
    assert check("json_schema", '{"label": "tech"}', schema=SCHEMA) == (True, "")
    ok, why = check("json_schema", '{"label": "science"}', schema=SCHEMA)
    assert not ok and why.startswith("json_schema: enum (") and "at label" in why
    ok, why = check("json_schema", '{"label": "tech", "extra": 1}', schema=SCHEMA)
    assert not ok and why.startswith("json_schema: additionalProperties")
    assert check("json_schema", "```\n{\"label\": \"tech\"}\n```", schema=SCHEMA)[0] is True  # fence: json's job
    assert check("json_schema", "nothing", schema=SCHEMA) == (False, "json_schema: no JSON to validate")
    assert check("json_schema", "{}", schema=None) == (None, "")


def test_regex_check():
    assert check("regex", "Order #123", regex=parse_regex(r"#\d+"))[0] is True
    assert check("regex", "Order", regex=parse_regex(r"^\d+$")) == (False, r"regex: no match (^\d+$)")


@pytest.mark.parametrize("output", [
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
    '{"type": "function", "function": {"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}}',
    '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}',
    '[{"name": "get_time"}]',
])
def test_tool_call_passes(output):
    assert check("tool_call", output, tools=parse_tools(TOOLS)) == (True, "")


@pytest.mark.parametrize("output, why", [
    ("I cannot call tools", "tool_call: no tool call found"),
    ('{"arguments": {}}', "tool_call: no tool name"),
    ('{"name": "get_news", "arguments": {}}', "tool_call: unknown tool ('get_news'; declared: get_weather, get_time)"),
    ('{"name": "get_weather", "arguments": {}}', "tool_call: arguments required"),
    ('{"name": "get_weather", "arguments": "{city"}', "tool_call: arguments are not valid JSON"),
    ('{"name": "get_weather", "arguments": [1]}', "tool_call: arguments are not a JSON object"),
    ('[{"name": "get_time"}, {"name": "get_time"}]', "tool_call: expected one tool call"),
])
def test_tool_call_fails(output, why):
    ok, reason = check("tool_call", output, tools=parse_tools(TOOLS))
    assert ok is False and reason.startswith(why)


def test_tool_call_wrong_tool_against_reference():
    ok, why = check("tool_call", '{"name": "get_time"}', tools=parse_tools(TOOLS),
                    reference='{"name": "get_weather", "arguments": {"city": "Paris"}}')
    assert not ok and why == "tool_call: wrong tool ('get_time' for 'get_weather')"


def test_parse_tool_call_shapes():
    assert parse_tool_call('{"name": "f", "parameters": {"x": 1}}') == ({"name": "f", "arguments": {"x": 1}}, "")


def test_parse_check_names():
    assert parse_check_names("json, label") == ["json", "label"]
    assert parse_check_names('["regex"]') == ["regex"]
    assert parse_check_names(["json", "json"]) == ["json"]
    assert parse_check_names(None) is None and parse_check_names(" ") is None
    with pytest.raises(ValueError, match="unknown check 'jsn'"):
        parse_check_names("jsn")


def test_parse_schema_rejects_invalid_schema():
    assert parse_schema(json.dumps(SCHEMA)) == SCHEMA
    assert parse_schema(None) is None and parse_schema("") is None
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        parse_schema({"type": "objekt"})
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_schema("{type: object}")
    with pytest.raises(ValueError, match="is an object"):
        parse_schema("[1]")


def test_parse_tools_shapes_and_errors():
    assert [t["name"] for t in parse_tools({"f": {"type": "object"}, "g": None})] == ["f", "g"]
    with pytest.raises(ValueError, match="tool 0 has no 'name'"):
        parse_tools([{"parameters": {}}])
    with pytest.raises(ValueError, match="'f' parameters: not a valid JSON Schema"):
        parse_tools([{"name": "f", "parameters": {"type": 5}}])


def test_prepare_columns_names_file_line_and_column():
    frame = pd.DataFrame({"schema": [json.dumps(SCHEMA), '{"type": "objekt"}']})
    with pytest.raises(DataError) as info:
        prepare_columns(frame, source="prompts.jsonl", lines=[1, 7], columns={"schema": "schema"})
    message = str(info.value)
    assert message.startswith("prompts.jsonl, line 7, column 'schema': not a valid JSON Schema")
    assert "\n" not in message


def test_prepare_columns_regex_and_global_pattern():
    frame = pd.DataFrame({"regex": [r"\d", None]})
    parsed = prepare_columns(frame, source="p.csv", columns={"regex": "regex"}, regex="^x")
    assert [p.pattern for p in parsed["regex"]] == [r"\d", "^x"]
    with pytest.raises(DataError, match=r"p.csv, line 2, column 'regex': not a valid regular expression"):
        prepare_columns(pd.DataFrame({"regex": ["a", "("]}), source="p.csv", columns={"regex": "regex"})
    with pytest.raises(ParameterError, match=r"regex='\(' is invalid: expected a valid regular expression"):
        prepare_columns(pd.DataFrame({"x": [1]}), source="p.csv", columns={}, regex="(")


def test_default_checks():
    assert default_checks(["reference"]) == ["normalized"]
    assert default_checks(["reference", "label", "schema"]) == ["label", "json", "json_schema"]
    assert default_checks(["tools", "regex"]) == ["regex", "tool_call"]
    assert default_checks([]) == []


def test_check_names_parameter_error():
    assert output_cells.check_names("exact,json") == ["exact", "json"]
    with pytest.raises(ParameterError, match="output_checks='nope' is invalid"):
        output_cells.check_names("nope")


def test_run_checks_columns_and_failure_reason():
    outputs = ['{"label": "tech"}', '```json\n{"label": "sport"}\n```', "no idea"]
    rows = [{"label": "tech", "schema": SCHEMA, "reference": '{"label": "tech"}'},
            {"label": "tech", "schema": SCHEMA, "reference": '{"label": "tech"}'},
            {"label": "sport", "schema": None, "reference": None}]
    out = run_checks(outputs, rows, ["label", "json", "json_schema"], labels=LABELS,
                     per_row_checks=[None, None, ["label", "exact"]])
    assert out["pred"].tolist() == ["tech", "sport", UNPARSEABLE]
    assert out["passed"].tolist() == [True, False, False]
    assert out["failure_reason"].iloc[0] == ""
    assert out["failure_reason"].iloc[1] == ("label: wrong label ('sport' for 'tech'); json: wrapped in a code fence")
    assert out["failure_reason"].iloc[2].startswith("label: unparseable (no allowed label")
    # registry order; a check that does not apply (no reference, not requested) is null
    assert [c for c in out.columns if c.startswith("check_") and not c.endswith("_reason")] == [
        "check_exact", "check_label", "check_json", "check_json_schema"]
    assert out["check_exact"].isna().tolist() == [True, True, True]
    assert out["check_json_schema"].tolist()[:2] == [True, True] and pd.isna(out["check_json_schema"].iloc[2])
    assert out["check_json_reason"].tolist()[:2] == ["", "json: wrapped in a code fence"]


def test_run_checks_without_labels_and_bad_arguments():
    out = run_checks(["a"], [{"reference": "a"}], ["exact"])
    assert out["pred"].isna().all() and out["passed"].tolist() == [True]
    with pytest.raises(ParameterError, match="rows=0 is invalid"):
        run_checks(["a"], [], ["exact"])
    with pytest.raises(ParameterError, match="checks='nope' is invalid"):
        run_checks(["a"], [{}], ["nope"])


def test_register_a_custom_checker():
    @output_checks.register("short", description="at most 3 words")
    def short(output, row, ctx):
        return len(output.split()) <= 3, "short: too long"

    try:
        out = run_checks(["one two", "one two three four"], [{}, {}], ["short"])
        assert out["passed"].tolist() == [True, False]
        assert out["failure_reason"].tolist() == ["", "short: too long"]
    finally:
        CHECKERS.pop("short")


def test_json_cut_off_by_max_new_tokens():
    ok, why = check("json", '{"label": "tech", "title": "Mark', stop_reason="length")
    assert not ok and why.startswith("json: cut off at max_new_tokens (Unterminated string starting at character")
    ok, why = check("json", '{"label": "tech", "title": "Mark', stop_reason="eos")
    assert not ok and why.startswith("json: not valid JSON (")
