"""The signals (shape, length, repetition, refusal, language) and the JSON reference's field comparison, each on
planted and clean outputs; and that a reference given is always compared."""

from __future__ import annotations

import json

import pytest

from erroranalysis.infer.output_checks import CHECKERS, CheckContext, run_checks
from erroranalysis.infer.output_signals import find_loop, find_refusal

REF = json.dumps({"customer": "Bob Chen", "total": 15, "summary": "The invoice was reviewed and looks right."})


def check(name, output, **row):
    return CHECKERS[name].func(output, row, CheckContext())


@pytest.mark.parametrize("output, reason", [
    ("", "shape: empty output"),
    ("   \n", "shape: empty output"),
    ('Sure! Here is the JSON:\n{"a": 1}', "shape: text before the JSON"),
    ('{"a": 1}\n\nLet me know if you need anything else!', "shape: text after the JSON"),
    ('Here: {"a": 1} Hope it helps.', "shape: text around the JSON"),
    ('```json\n{"a": 1}\n```', "shape: wrapped in a code fence"),
    ('{"a": 1, "b": "unfinish', "shape: JSON cut short"),
    ("I'm sorry, I can't do that.", "shape: no JSON in the output"),
])
def test_shape_planted(output, reason):
    ok, why = check("shape", output, schema={"type": "object"})
    assert not ok and why.startswith(reason)


def test_shape_clean_and_cut_at_the_limit():
    assert check("shape", '{"a": 1}', schema={"type": "object"}) == (True, "")
    assert check("shape", " [1, 2] ", reference="[1, 2]") == (True, "")
    # no JSON expected (no schema, tools or JSON reference; the output opens none): prose is fine
    assert check("shape", "Paris is the capital of France.", reference="Paris") == (True, "")
    ok, why = check("shape", '{"a": [1, 2', stop_reason="length")
    assert not ok and why.startswith("shape: cut off at max_new_tokens (")


def test_length():
    assert check("length", "abc", stop_reason="length", n_output_tokens=64) == (
        False, "length: cut off at max_tokens (64 tokens)")
    assert check("length", "abc", stop_reason="eos") == (True, "")
    assert check("length", "abc", stop_reason="unknown") == (None, "")
    # with the limit known, the count decides even without a stop reason
    out = run_checks(["a b", "a b"], [{"n_output_tokens": 32}, {"n_output_tokens": 5}], ["exact"],
                     max_new_tokens=32)
    assert out["check_length"].tolist() == [False, True]


@pytest.mark.parametrize("output", [
    "I think I think I think I think I think I think I think I think I think I think",
    "The answer is 4. Let me check again. Let me check again. Let me check again. Let me check again.",
    '{"items": [ "items": [ "items": [ "items": [ "items": [ "items": [ "items": [',
    "ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok",
    "答案是答案是答案是答案是答案是答案是答案是答案是答案是答案是答案是答案是答案是答案是答案是答案是",
])
def test_repetition_planted(output):
    ok, why = check("repetition", output)
    assert not ok and why.startswith("repetition: a loop (")


@pytest.mark.parametrize("output", [
    "The server crashes when the user logs out twice, and the logs show a null pointer in the session code.",
    json.dumps([{"name": "a", "qty": 1}, {"name": "b", "qty": 2}, {"name": "c", "qty": 3}, {"name": "d", "qty": 4}]),
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15",
    "short",
])
def test_repetition_clean(output):
    assert check("repetition", output)[0] in (True, None)
    assert find_loop(output) is None


@pytest.mark.parametrize("output", [
    "I'm sorry, but I can't help with that request.", "As an AI language model, I cannot browse the web.",
    "I am unable to assist with this.", "Unfortunately I'm not able to help with that one.",
    "I must decline to answer.", "Sorry, I won't be able to do that.",
])
def test_refusal_planted(output):
    ok, why = check("refusal", output)
    assert not ok and why.startswith("refusal: declines to answer (")


@pytest.mark.parametrize("output", [
    '{"title": "Login fails", "notes": "I cannot reproduce the bug on version 2.1"}',
    "Sorry for the delay: the capital of Peru is Lima.", "The refund was sent on Monday.",
])
def test_refusal_clean(output):
    assert find_refusal(output) is None and check("refusal", output) == (True, "")


def test_language():
    prompt = "Summarize the customer's complaint about the late delivery in one sentence."
    ok, why = check("language", "El cliente informa que el paquete llegó tarde y pide una actualización.",
                    prompt=prompt)
    assert not ok and why == "language: wrong language (Spanish where the prompt is in English)"
    assert check("language", "The customer says the parcel arrived late and asks for an update.",
                 prompt=prompt) == (True, "")
    # the reference decides when it is text; a prompt that asks for the language is no mismatch
    ok, why = check("language", "Le client signale que le colis est arrivé en retard.", prompt=prompt,
                    reference="The customer reports that the parcel arrived late.")
    assert not ok and "where the reference is in English" in why
    assert check("language", "Le client signale que le colis est arrivé en retard.",
                 prompt="Translate into French: the customer reports that the parcel arrived late.")[0]
    # too short to tell, or a JSON answer whose strings are in the prompt's language
    assert check("language", "Oui.", prompt=prompt) == (None, "")
    assert check("language", json.dumps({"summary": "The parcel arrived late and the customer wants news."}),
                 prompt=prompt) == (True, "")


@pytest.mark.parametrize("output, reason", [
    ({"client": "Bob Chen", "total": 15, "summary": "The invoice was reviewed and looks right."},
     "json_fields: renamed field (customer -> client)"),
    ({"customerName": "Bob Chen", "total": 15, "summary": "The invoice was reviewed and looks right."},
     "json_fields: renamed field (customer -> customerName)"),
    ({"customer": "Bob Chen", "summary": "The invoice was reviewed and looks right."},
     "json_fields: missing field (missing total)"),
    ({"customer": "Bob Chen", "total": 15, "summary": "The invoice was reviewed and looks right.", "tax": 2},
     "json_fields: extra field (extra tax)"),
    ({"customer": "Bob Chen", "total": 12, "summary": "The invoice was reviewed and looks right."},
     "json_fields: wrong value (total: 12 for 15)"),
])
def test_json_fields_planted(output, reason):
    assert check("json_fields", json.dumps(output), reference=REF) == (False, reason)


def test_json_fields_clean_and_not_applicable():
    same = '{"total": "15", "summary": "the invoice was reviewed, and looks right", "customer": "bob chen"}'
    assert check("json_fields", same, reference=REF) == (True, "")  # order, case, punctuation, "15" == 15
    assert check("json_fields", "no json here", reference=REF) == (False, "json_fields: no JSON to compare")
    assert check("json_fields", "Paris", reference="Paris") == (None, "")  # a text reference: not this check's
    ok, why = check("json_fields", '{"a": {"b": [1, 3]}}', reference='{"a": {"b": [1, 2]}}')
    assert not ok and why == "json_fields: wrong value (a.b[1]: 3 for 2)"


def test_signals_explain_failures_but_never_fail_a_pass():
    outputs = ["I think I think I think I think I think I think I think I think I think I think", "Paris"]
    rows = [{"reference": "Paris", "stop_reason": "length", "n_output_tokens": 64},
            {"reference": "Paris", "stop_reason": "length", "n_output_tokens": 64}]
    out = run_checks(outputs, rows, ["normalized"])
    assert out["passed"].tolist() == [False, True]
    assert out["failure_reason"].tolist() == [
        "normalized: differs from the reference; length: cut off at max_tokens (64 tokens); "
        "repetition: a loop ('i think' repeated 10 times)", ""]
    assert out["check_length"].tolist() == [False, False]  # the column holds the signal on every row
    assert not run_checks(outputs, rows, ["normalized"], signals=False).columns.str.startswith("check_length").any()


def test_a_reference_beside_a_schema_is_compared(tmp_path):
    """With reference and schema columns, a valid JSON with a wrong value fails (it passed before)."""
    from erroranalysis.infer.generation import GenerationParams
    from erroranalysis.sources.generations import SourceParams
    from erroranalysis.sources.table import DataOptions
    from erroranalysis.stages.load_generations import imported_table, prepare_generations

    schema = {"type": "object", "required": ["total"], "properties": {"total": {"type": "number"}}}
    rows = [{"prompt": "Total of: two items at 7.50", "output": '{"total": 15}', "reference": '{"total": 15}'},
            {"prompt": "Total of: two items at 7.50", "output": '{"total": 14}', "reference": '{"total": 15}'},
            {"prompt": "Capital of France?", "output": "Lyon", "reference": "Paris", "schema": None}]
    path = tmp_path / "out.jsonl"
    path.write_text("".join(json.dumps({**r, "schema": json.dumps(schema) if "schema" not in r else None}) + "\n"
                            for r in rows))
    prepared = prepare_generations(path, DataOptions(), GenerationParams(), SourceParams())
    assert prepared["checks"] == ["json", "json_schema", "json_fields"]
    table = imported_table(prepared)
    assert table["correct"].tolist()[:2] == [True, False]
    assert table["failure_reason"].iloc[1] == "json_fields: wrong value (total: 14 for 15)"
