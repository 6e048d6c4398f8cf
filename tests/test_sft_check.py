"""sft-check's core: each finding kind on a planted row and on none of the clean rows, in every TRL format and
masking mode; rows given as the user's own tokens; the bad inputs, each one line naming file, line and column."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sft_fixtures import (
    CLEAN_CONV_PAIRS,
    CLEAN_MESSAGES,
    CLEAN_PAIRS,
    CLEAN_TEXT,
    conversation,
    tokenizer,
    write_jsonl,
)

from erroranalysis import sft
from erroranalysis.core.errors import DataError, ParameterError


@pytest.fixture(scope="module")
def tokens():
    return sft.facts(tokenizer(generation=True))


@pytest.fixture(scope="module")
def plain_tokens():  # a template without {% generation %} markers
    return sft.facts(tokenizer())


def rows_of(data: list[dict], source_column: str | None = None):
    return sft.rows_of(pd.DataFrame(data).assign(_line=np.arange(1, len(data) + 1)), "train.jsonl", source_column)


def check(data, tokens, tokenized=None, **params):
    return sft.check(rows_of(data), tokens, sft.SftParams(**params), tokenized=tokenized)


def kinds(result, row: int | None = None) -> set[str]:
    f = result.findings
    return set(f["kind"] if row is None else f.loc[f["row"] == row, "kind"])


def given(ids, labels, mask=None) -> sft.tokenized.TokenizedRow:
    ids, labels = np.asarray(ids, dtype=np.int64), np.asarray(labels, dtype=np.int64)
    return sft.tokenized.TokenizedRow(ids, labels, 0)


def trl_rows(data, tokens, mode="trl", max_length=None):
    """Our rendering of `data` as (ids, labels) lists: what TRL's preparation gives (tests/test_sft_trl.py)."""
    rows = rows_of(data)
    out = []
    for e in sft.render(rows, tokens, sft.SftParams(mode=mode).effective_mode(rows.format)):
        out.append((e.ids[:max_length].tolist(), np.where(e.trained, e.ids, -100)[:max_length].tolist()))
    return out


# -- clean rows: no finding in any format or mode ------------------------------------------------------------------


@pytest.mark.parametrize("data", [CLEAN_MESSAGES, CLEAN_PAIRS, CLEAN_CONV_PAIRS, CLEAN_TEXT],
                         ids=["messages", "prompt_completion", "conversational_pairs", "text"])
@pytest.mark.parametrize("mode", ["trl", "assistant-only", "completion-only", "all-tokens"])
def test_clean_rows_have_no_findings(data, mode, tokens):
    rows = rows_of(data)
    if mode == "assistant-only" and not rows.conversational:
        with pytest.raises(DataError, match="--assistant-only needs conversational rows"):
            check(data, tokens, mode=mode)
        return
    result = check(data, tokens, mode=mode)
    expected = {"prompt_trained"} if mode == "completion-only" and rows.format == "messages" else set()
    assert kinds(result) == expected, result.findings.to_dict("records")
    assert len(result.rows) == len(data) and (result.rows["n_trained"] > 0).all()


def test_clean_tokenized_rows_have_no_findings(tokens):
    for data, mode in [(CLEAN_MESSAGES, "assistant-only"), (CLEAN_PAIRS, "trl"), (CLEAN_TEXT, "trl")]:
        mine = [given(ids, labels) for ids, labels in trl_rows(data, tokens, mode)]
        assert kinds(check(data, tokens, tokenized=mine, mode=mode)) == set()


# -- each kind, planted -------------------------------------------------------------------------------------------


def test_nothing_trained_on_all_masked_labels(tokens):
    rows = trl_rows(CLEAN_MESSAGES, tokens)
    mine = [given(ids, [-100] * len(ids)) if i == 1 else given(ids, labels) for i, (ids, labels) in enumerate(rows)]
    result = check(CLEAN_MESSAGES, tokens, tokenized=mine)
    assert kinds(result) == {"nothing_trained"} and set(result.findings["row"]) == {1}
    assert "TRL drops it" in result.findings["detail"].iloc[0]
    assert result.summary["counts"]["nothing_trained"] == 1


def test_nothing_trained_and_answer_dropped_when_the_prompt_fills_max_length(tokens):
    long_prompt = {"prompt": "What is the capital of France? " * 8, "completion": "Paris."}
    result = check(CLEAN_PAIRS + [long_prompt], tokens, max_length=30)
    assert kinds(result, 3) == {"nothing_trained", "answer_dropped", "too_long"}
    assert kinds(result) == kinds(result, 3)


def test_prompt_trained_in_tokenized_rows_and_completion_only_messages(tokens):
    rows = trl_rows(CLEAN_MESSAGES, tokens, "assistant-only")
    mine = [given(ids, ids if i == 2 else labels) for i, (ids, labels) in enumerate(rows)]  # row 2: every token
    result = check(CLEAN_MESSAGES, tokens, tokenized=mine, mode="assistant-only")
    assert kinds(result) == {"prompt_trained"} and set(result.findings["row"]) == {2}
    assert "(assistant-only)" in result.findings["detail"].iloc[0]
    # completion_only_loss on messages rows: TRL trains every token, the prompt too
    whole = check(CLEAN_MESSAGES, tokens, mode="completion-only")
    assert set(whole.findings.loc[whole.findings["kind"] == "prompt_trained", "row"]) == {0, 1, 2, 3}
    assert any("completion_only_loss does nothing" in n for n in whole.summary["notes"])


def test_answer_truncated_and_too_long(tokens):
    long_answer = {"messages": conversation(a="The capital of France is Paris. " * 6)}
    result = check(CLEAN_MESSAGES[:1] + [long_answer], tokens, mode="assistant-only", max_length=60)
    assert kinds(result, 0) == set()
    assert kinds(result, 1) == {"answer_truncated", "too_long"}
    detail = result.findings.set_index("kind")["detail"]
    assert "answer tokens kept (max_length 60)" in detail["answer_truncated"]
    assert detail["too_long"].endswith("cut") and "max_length 60" in detail["too_long"]


def test_missing_eos_when_the_row_stops_before_its_end_token(tokens):
    rows = trl_rows(CLEAN_PAIRS, tokens)
    ids, labels = rows[0]
    mine = [given(ids[:-1], labels[:-1])] + [given(i, lab) for i, lab in rows[1:]]  # no EOS appended
    result = check(CLEAN_PAIRS, tokens, tokenized=mine)
    assert kinds(result) == {"missing_eos"} and set(result.findings["row"]) == {0}
    # max_length cutting exactly the EOS away: the answer is whole, the model still never sees it stop
    n = len(trl_rows(CLEAN_PAIRS, tokens)[1][0])
    cut = check(CLEAN_PAIRS[1:2], tokens, max_length=n - 1)
    assert kinds(cut) == {"missing_eos", "too_long"}


def test_eos_masked_when_pad_is_eos_and_the_collator_masks_pad_ids(tokens):
    rows = trl_rows(CLEAN_MESSAGES, tokens, "assistant-only")
    eos = tokens.eos_id
    mine = [given(ids, [(-100 if t == eos else lab) for t, lab in zip(ids, labels)]) if i == 0 else given(ids, labels)
            for i, (ids, labels) in enumerate(rows)]
    result = check(CLEAN_MESSAGES, tokens, tokenized=mine, mode="assistant-only")
    assert kinds(result) == {"eos_masked"} and set(result.findings["row"]) == {0}


def test_double_bos_when_text_already_holds_the_bos_token():
    bos_tokens = sft.facts(tokenizer(bos=True))
    data = [{"text": "The capital of France is Paris."}, {"text": "<s>A cat sat on the mat."}]
    result = check(data, bos_tokens)
    assert kinds(result) == {"double_bos"} and set(result.findings["row"]) == {1}


def test_template_mismatch_for_a_text_column_and_for_tokenized_rows(tokens):
    rendered = tokens.tokenizer.apply_chat_template(CLEAN_MESSAGES[0]["messages"], tokenize=False)
    data = [{**CLEAN_MESSAGES[0], "text": rendered},
            {**CLEAN_MESSAGES[1], "text": "### User: Translate to French: good morning.\n### Assistant: Bonjour."}]
    result = check(data, tokens)
    assert kinds(result) == {"template_mismatch"} and set(result.findings["row"]) == {1}
    assert "character 0" in result.findings["detail"].iloc[0]
    # the user's ids from another template (system turn dropped): a mismatch, yet prompt/answer still placed
    rows = trl_rows(CLEAN_MESSAGES, tokens, "assistant-only")
    other = trl_rows([{"messages": CLEAN_MESSAGES[0]["messages"][1:]}], tokens, "assistant-only")[0]
    mine = [given(*other)] + [given(i, lab) for i, lab in rows[1:]]
    result = check(CLEAN_MESSAGES, tokens, tokenized=mine, mode="assistant-only")
    assert kinds(result) == {"template_mismatch"} and set(result.findings["row"]) == {0}


def test_labels_shifted_by_hand(tokens):
    rows = trl_rows(CLEAN_PAIRS, tokens)
    ids, labels = rows[2]
    mine = [given(i, lab) for i, lab in rows[:2]] + [given(ids, labels[1:] + [-100])]
    result = check(CLEAN_PAIRS, tokens, tokenized=mine)
    assert kinds(result) == {"labels_shifted"} and set(result.findings["row"]) == {2}


def test_empty_answer(tokens):
    data = CLEAN_MESSAGES[:1] + [{"messages": conversation(a="")}, {"messages": conversation()[:2]}]
    result = check(data, tokens, mode="assistant-only")
    assert kinds(result, 0) == set()
    assert "empty_answer" in kinds(result, 1) and "empty_answer" in kinds(result, 2)
    assert "no assistant message" in set(result.findings["detail"])
    pairs = check(CLEAN_PAIRS + [{"prompt": "Say nothing: ", "completion": " "}], tokens)
    assert kinds(pairs) == {"empty_answer"}


def test_duplicate_row(tokens):
    result = check(CLEAN_MESSAGES + [CLEAN_MESSAGES[2]], tokens)
    assert kinds(result) == {"duplicate_row"} and set(result.findings["row"]) == {4}
    assert result.findings["detail"].iloc[0] == "the same tokens as row 2"


def test_every_kind_is_planted_somewhere_above():
    import inspect
    import sys

    source = inspect.getsource(sys.modules[__name__])
    assert all(f"{{\"{kind}\"}}" in source or f'"{kind}"' in source for kind in sft.KINDS)


# -- assistant-only without generation markers, the summary, the sources --------------------------------------------


def test_assistant_only_without_generation_markers_marks_the_assistant_turns(tokens, plain_tokens):
    marked = trl_rows(CLEAN_MESSAGES, tokens, "assistant-only")
    spans = trl_rows(CLEAN_MESSAGES, plain_tokens, "assistant-only")
    assert spans == marked  # the same masks as the template with {% generation %} blocks
    result = check(CLEAN_MESSAGES, plain_tokens, mode="assistant-only")
    assert kinds(result) == set() and "no {% generation %} markers" in result.summary["notes"][0]


def test_summary_counts_tokens_and_the_mixture_per_source(tokens):
    data = [{**r, "source": "chat"} for r in CLEAN_MESSAGES] + [{"messages": conversation(a="Paris. " * 20),
                                                                 "source": "long"}]
    result = sft.check(rows_of(data, "source"), tokens, sft.SftParams(mode="assistant-only"))
    s = result.summary
    per_row = result.rows["n_trained"].to_numpy()
    assert s["trained_tokens_per_row"]["total"] == per_row.sum()
    assert s["sources"]["long"]["trained_tokens"] == per_row[4]
    assert s["sources"]["long"]["share_of_rows"] == 0.2
    assert s["sources"]["long"]["share_of_trained"] == round(per_row[4] / per_row.sum(), 4) > 0.2
    assert sum(v["share_of_trained"] for v in s["sources"].values()) == pytest.approx(1, abs=1e-3)
    assert set(s["counts"]) == set(sft.KINDS)


def test_segments_rebuild_the_text_and_mark_what_is_trained(tokens):
    result = check(CLEAN_MESSAGES[:1], tokens, mode="assistant-only")
    row = result.rows.iloc[0]
    text = tokens.tokenizer.apply_chat_template(CLEAN_MESSAGES[0]["messages"], tokenize=False)
    assert "".join(row["segments"]) == text
    trained = [s for s, state in zip(row["segments"], row["segment_state"]) if state == 1]
    assert trained == ["The capital of France is Paris.<|im_end|>"]


# -- bad input: one line naming the file, line and column ----------------------------------------------------------


@pytest.mark.parametrize("record, expected", [
    ({"messages": "hello"}, "train.jsonl, line 2, column 'messages': holds a str; expected a list of messages"),
    ({"messages": [{"role": "user"}]}, "line 2, column 'messages': message 0 (user) has no \"content\""),
    ({"messages": [{"content": "x"}]}, "line 2, column 'messages': message 0 has no \"role\" string"),
])
def test_bad_messages_are_named(tmp_path, record, expected):
    path = write_jsonl(tmp_path / "train.jsonl", CLEAN_MESSAGES[:1] + [record])
    with pytest.raises(DataError) as info:
        sft.read_rows(path)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_bad_columns_and_types_are_named(tmp_path):
    with pytest.raises(DataError, match="no 'messages', 'prompt'/'completion' or 'text' column"):
        sft.read_rows(write_jsonl(tmp_path / "a.jsonl", [{"question": "x"}]))
    with pytest.raises(DataError, match="a 'prompt' column without 'completion'"):
        sft.read_rows(write_jsonl(tmp_path / "b.jsonl", [{"prompt": "x"}]))
    with pytest.raises(DataError, match=r"c.jsonl, line 2, column 'completion': holds a int, not text"):
        sft.read_rows(write_jsonl(tmp_path / "c.jsonl", [{"prompt": "x", "completion": "y"},
                                                         {"prompt": "x", "completion": 3}]))
    with pytest.raises(DataError, match="no source column 'origin'"):
        sft.read_rows(write_jsonl(tmp_path / "d.jsonl", CLEAN_TEXT), source_column="origin")


def test_bad_tokenized_rows_are_named(tmp_path):
    path = tmp_path / "tok.jsonl"
    write_jsonl(path, [{"input_ids": [1, 2, 3], "labels": [1, 2]}])
    with pytest.raises(DataError, match=r"tok.jsonl, line 1, column 'labels': 2 labels for 3 input_ids"):
        sft.read_tokenized(path, 1, "train.jsonl")
    write_jsonl(path, [{"input_ids": [1, "a"], "labels": [1, 2]}])
    with pytest.raises(DataError, match=r"line 1, column 'input_ids': holds a list holding non-integers"):
        sft.read_tokenized(path, 1, "train.jsonl")
    write_jsonl(path, [{"input_ids": [1, 2], "labels": [1, 2]}])
    with pytest.raises(DataError, match="1 rows, but train.jsonl has 2; row i of --tokenized must be row i"):
        sft.read_tokenized(path, 2, "train.jsonl")
    write_jsonl(path, [{"input_ids": [1, 2]}])
    with pytest.raises(DataError, match="no 'labels' column"):
        sft.read_tokenized(path, 1, "train.jsonl")


def test_tokenized_padding_is_dropped_by_its_attention_mask(tmp_path, tokens):
    ids, labels = trl_rows(CLEAN_PAIRS[:1], tokens)[0]
    pad = tokens.pad_id
    path = write_jsonl(tmp_path / "tok.jsonl", [{"input_ids": ids + [pad] * 3, "labels": labels + [-100] * 3,
                                                 "attention_mask": [1] * len(ids) + [0] * 3}])
    mine = sft.read_tokenized(path, 1, "train.jsonl")
    assert mine[0].ids.tolist() == ids and mine[0].padding == 3
    assert kinds(check(CLEAN_PAIRS[:1], tokens, tokenized=mine)) == set()


def test_bad_mode_and_max_length_are_refused():
    with pytest.raises(ParameterError, match="expected one of trl, assistant-only") as info:
        sft.SftParams(mode="prompt-only")
    assert info.value.flag == "--mode"
    with pytest.raises(ParameterError, match="expected an integer") as info:
        sft.SftParams(max_length=0)
    assert info.value.flag == "--max-length"


def test_messages_as_json_text_in_a_csv(tmp_path, tokens):
    import json

    path = tmp_path / "train.csv"
    pd.DataFrame({"messages": [json.dumps(r["messages"]) for r in CLEAN_MESSAGES]}).to_csv(path, index=False)
    rows = sft.read_rows(path)
    assert rows.conversations == [r["messages"] for r in CLEAN_MESSAGES]
    assert kinds(sft.check(rows, tokens, sft.SftParams())) == set()
    path.write_text('messages\n"[{""role"": ""user"""\n')
    with pytest.raises(DataError, match=r"train.csv, line 2, column 'messages': not valid JSON"):
        sft.read_rows(path)
