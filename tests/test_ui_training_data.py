"""The Training data page on a real sft-check run: the summary, the findings by kind, the mixture per source, each
row with its trained spans highlighted (user text escaped), the kind filter; a run without the check says how to
make one."""

from __future__ import annotations

import pytest
from app_session import app_env, open_app, texts
from sft_fixtures import CLEAN_MESSAGES, conversation, save_tokenizer, write_jsonl
from ui_fixtures import make_run

from erroranalysis import stages
from erroranalysis.sft import SftParams
from erroranalysis_ui.eaui import spans, state
from erroranalysis_ui.eaui.components import md as ui_md

ROWS = CLEAN_MESSAGES + [{"messages": conversation(a="")}, CLEAN_MESSAGES[0],
                         {"messages": conversation(q="**bold** [link](http://x) <b>html</b> $x$",
                                                   a="The capital of France is Paris. " * 10)}]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("ws")
    data_dir = tmp_path_factory.mktemp("data")
    tok = save_tokenizer(data_dir / "tok", generation=True)
    data = write_jsonl(data_dir / "train.jsonl", [{**r, "source": "long" if i == 6 else "chat"}
                                                  for i, r in enumerate(ROWS)])
    stages.sft_check(tok, data, root / "sft", SftParams(mode="assistant-only", max_length=64, source_column="source"))
    make_run(root / "classifier", n=40, n_failures=8, with_checks=False, with_clusters=False)
    return root


def open_page(workspace, tmp_path, monkeypatch, run: str, **session):
    app_env(monkeypatch, workspace, tmp_path / "labels.sqlite")
    return open_app("training_data", run, session=session)


def test_summary_findings_and_highlighted_rows(workspace, tmp_path, monkeypatch):
    at = open_page(workspace, tmp_path, monkeypatch, "sft")
    summary, findings, rows = stages.read_sft_run(workspace / "sft")
    assert [m.value for m in at.metric][:2] == ["7", str(summary["rows_with_findings"])]
    kinds = at.dataframe[0].value
    assert dict(zip(kinds["kind"], kinds["rows"])) == {k: n for k, n in summary["counts"].items() if n}
    mix = at.dataframe[1].value
    assert dict(zip(mix["source"], mix["trained_tokens"])) == {"chat": rows["n_trained"][:6].sum(),
                                                                "long": rows["n_trained"][6]}
    shown = texts(at)
    assert "no {% generation %} markers" not in shown  # this template has them
    # each row: its findings, then its text with the trained span in green
    assert ":green-background[The capital of France is Paris\\.\\<\\|im\\_end\\|\\>]" in shown
    for kind, detail in findings[["kind", "detail"]].values:
        assert f"**{ui_md(kind)}**] {ui_md(detail)}" in shown
    # user text is escaped: no bold, link, HTML or math from the row reaches the page
    row6 = spans.row_markdown(rows["segments"][6], rows["segment_state"][6])
    assert "\\*\\*bold\\*\\* \\[link\\]\\(http\\:" in row6 and "\\<b\\>html\\<" in row6 and "\\$x\\$" in row6
    assert row6.strip() in shown and ":red-background[~~" in row6


def test_the_kind_filter_lists_only_its_rows(workspace, tmp_path, monkeypatch):
    at = open_page(workspace, tmp_path, monkeypatch, "sft", SFT_KIND="empty_answer")
    headings = [m.value for m in at.markdown if m.value.startswith("**Row ")]
    assert headings == ["**Row 4** (line 5): 32 tokens, 1 trained"]
    at.selectbox(key=state.SFT_KIND).set_value("").run()
    assert len([m for m in at.markdown if m.value.startswith("**Row ")]) == 7


def test_a_run_without_the_check_says_how_to_make_one(workspace, tmp_path, monkeypatch):
    at = open_page(workspace, tmp_path, monkeypatch, "classifier")
    assert any("erroranalysis sft-check --model" in i.value for i in at.info)


def test_row_markdown_keeps_lines_and_marks_each_state():
    md = spans.row_markdown(["<|im_start|>user\nhi:", " there\n", "cut"], [0, 1, 2])
    assert md == (":gray[\\<\\|im\\_start\\|\\>user]  \n:gray[hi\\:]:green-background[ there]  \n"
                  ":red-background[~~cut~~]")
    assert spans.row_markdown(["x" * 50], [1], limit=10).endswith("(cut here for display)")
