"""Eval-set loading: every format, column mapping, and each bad input named precisely."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import eval_rows, write_jsonl

from erroranalysis.core.errors import DataError, ParameterError
from erroranalysis.sources.table import MAX_CHARS, load_eval_set, map_labels


def test_jsonl_maps_columns_and_keeps_metadata(tmp_path):
    es = load_eval_set(write_jsonl(tmp_path / "e.jsonl", eval_rows(9)), id_column="id")
    assert list(es.frame.columns[:4]) == ["_line", "example_id", "text", "label"]
    assert es.metadata_columns == ["source", "stars"]
    assert es.frame["example_id"].tolist()[:2] == ["ex000", "ex001"]
    assert es.frame["_line"].tolist()[:3] == [1, 2, 3]
    assert len(es.sha256) == 64


def test_default_id_is_row_number(tmp_path):
    es = load_eval_set(write_jsonl(tmp_path / "e.jsonl", eval_rows(4)))
    assert es.frame["example_id"].tolist() == ["0", "1", "2", "3"]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_csv_and_parquet_equal_jsonl(tmp_path, fmt):
    rows = eval_rows(12)
    ref = load_eval_set(write_jsonl(tmp_path / "e.jsonl", rows), id_column="id").frame
    df = pd.DataFrame(rows)
    path = tmp_path / f"e.{fmt}"
    df.to_csv(path, index=False) if fmt == "csv" else df.to_parquet(path)
    got = load_eval_set(path, id_column="id").frame
    cols = ["example_id", "text", "label", "source", "stars"]
    pd.testing.assert_frame_equal(got[cols].astype(str), ref[cols].astype(str))


def test_hf_dataset_folder(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(eval_rows(5)).save_to_disk(tmp_path / "ds")
    es = load_eval_set(tmp_path / "ds", id_column="id")
    assert es.frame["label"].tolist() == [r["label"] for r in eval_rows(5)]
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(eval_rows(3)),
                               "test": datasets.Dataset.from_list(eval_rows(4))})
    dd.save_to_disk(tmp_path / "dd")
    assert len(load_eval_set(tmp_path / "dd", split="test")) == 4
    with pytest.raises(DataError, match="choose one with --split"):
        load_eval_set(tmp_path / "dd")


def test_integer_labels_map_through_id2label(tmp_path):
    path = tmp_path / "e.csv"
    path.write_text("text,label\na,0\nb,2\n")
    es = load_eval_set(path)
    assert map_labels(es.frame["label"].to_numpy(), ["neg", "neu", "pos"], source=str(path)).tolist() == ["neg", "pos"]


def test_encoding_option(tmp_path):
    path = tmp_path / "e.csv"
    path.write_bytes("text,label\ncafé,pos\n".encode("latin-1"))
    assert load_eval_set(path, encoding="latin-1").frame["text"].iat[0] == "café"


def test_extremely_long_text_is_cut_and_flagged(tmp_path):
    rows = [{"text": "word " * 200_000, "label": "a"}, {"text": "short", "label": "b"}]
    es = load_eval_set(write_jsonl(tmp_path / "e.jsonl", rows))
    assert len(es.frame["text"].iat[0]) == MAX_CHARS and es.frame["_cut"].tolist() == [True, False]
    assert es.describe()["max_chars"] == MAX_CHARS and es.describe()["n_cut"] == 1
    prompts = load_eval_set(tmp_path / "e.jsonl", max_chars=12, keep_end=True)
    assert prompts.frame["text"].iat[0] == ("word " * 200_000)[-12:]  # a prompt keeps its end (the question)
    with pytest.raises(ParameterError, match="max_chars=0 is invalid"):
        load_eval_set(tmp_path / "e.jsonl", max_chars=0)


def test_a_fractional_label_names_its_own_line(tmp_path):
    rows = "text,label\n" + "".join(f"t{i},{i % 5}\n" for i in range(2000)) + "odd,1.5\n"
    with pytest.raises(DataError, match=r"line 2002, column 'label': label 1.5 is neither a class name nor an "
                                        r"integer class id"):
        load_eval_set(bad(tmp_path, "e.csv", rows))


def test_label_ids_out_of_range_name_the_first_bad_one(tmp_path):
    es = load_eval_set(write_jsonl(tmp_path / "e.jsonl", [{"text": f"t{i}", "label": i} for i in range(8)]))
    with pytest.raises(DataError, match=r"line 6, column 'label': label id 5 is out of range: the model has 5 "
                                        r"classes \(ids 0-4"):
        map_labels(es.frame["label"].to_numpy(), ["a", "b", "c", "d", "e"], source="e.jsonl",
                   lines=es.frame["_line"].to_numpy())


@pytest.mark.parametrize("value, kind", [({"body": "x"}, "dict"), (42, "int"), ([1, 2], "list")])
def test_a_text_column_of_objects_or_numbers_is_refused(tmp_path, value, kind):
    path = write_jsonl(tmp_path / "e.jsonl", [{"text": "fine", "label": "a"}, {"text": value, "label": "a"}])
    with pytest.raises(DataError, match=rf"e.jsonl, line 2, column 'text': holds a {kind}, not text"):
        load_eval_set(path)


# -- bad input: one message that names the file and the line, column or value ------------------------------

def bad(tmp_path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


@pytest.mark.parametrize("name, content, kwargs, expected", [
    ("e.jsonl", "", {}, r"e\.jsonl: the file is empty"),
    ("e.csv", "text,label\n", {}, r"e\.csv: no examples \(only a header"),
    ("e.jsonl", '{"text": "a", "label": "x"}\n{"text": "b", "label": \n', {}, r"e\.jsonl, line 2: not valid JSON"),
    ("e.jsonl", '{"text": "a", "label": "x"}\n[1, 2]\n', {}, r"line 2: expected a JSON object"),
    ("e.jsonl", '{"body": "a", "label": "x"}\n', {}, r"no column 'text'; columns found: 'body', 'label'; name the right one with --text-column"),
    ("e.jsonl", '{"text": "a", "y": "x"}\n', {}, r"no column 'label'.*--label-column"),
    ("e.csv", b"text,label\ncaf\xe9,pos\n", {}, r"e\.csv, line 2: byte 0xe9 is not valid utf-8; pass the file's real encoding with --encoding"),
    ("e.csv", "text,label\na,pos\nb,\n", {}, r"e\.csv, line 3, column 'label': empty label"),
    ("e.jsonl", '{"text": "a", "label": "x", "id": 1}\n{"text": "b", "label": "x", "id": 2}\n{"text": "c", "label": "y", "id": 1}\n',
     {"id_column": "id"}, r"line 3, column 'id': duplicate id '1' \(first on line 1\)"),
    ("e.jsonl", '{"text": "a", "label": "x"}\n', {"id_column": "uid"}, r"no id column 'uid'"),
    ("e.txt", "a\n", {}, r"unknown file type '\.txt'"),
    ("e.csv", "text,label\na,b\n", {"encoding": "klingon"}, r"--encoding 'klingon' is not a known"),
])
def test_bad_input_is_one_precise_line(tmp_path, name, content, kwargs, expected):
    path = bad(tmp_path, name, content)
    with pytest.raises(DataError, match=expected) as info:
        load_eval_set(path, **kwargs)
    assert "\n" not in str(info.value)


def test_directory_where_a_file_was_expected(tmp_path):
    (tmp_path / "folder").mkdir()
    with pytest.raises(DataError, match="is a directory, not an eval-set file"):
        load_eval_set(tmp_path / "folder")


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        load_eval_set(tmp_path / "nope.jsonl")


def test_unknown_labels_list_a_few_and_the_known_ones(tmp_path):
    with pytest.raises(DataError) as info:
        map_labels(np.array(["pos", "sports", "weather"], dtype=object), ["neg", "pos"], source="e.jsonl",
                   lines=np.array([1, 2, 3]))
    message = str(info.value)
    assert "e.jsonl, line 2, column 'label': label 'sports'" in message
    assert "'weather'" in message and "known: 'neg', 'pos'" in message


def test_reserved_metadata_names_are_prefixed(tmp_path):
    es = load_eval_set(write_jsonl(tmp_path / "e.jsonl", [{"text": "a", "label": "x", "loss": 3, "pred": "y"}]))
    assert es.metadata_columns == ["meta_loss", "meta_pred"]


def test_csv_errors_name_the_physical_line_past_multi_line_cells(tmp_path):
    path = tmp_path / "eval.csv"
    path.write_text('id,text,label\na,"one\ntwo\nthree",x\nb,plain,y\n\nc,"multi\nline",\nd,ok,z\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"eval\.csv, line 7, column 'label': empty label"):
        load_eval_set(path, id_column="id")
    path.write_text('id,text,label\na,"x\ny",l\nb,c,d,e\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"eval\.csv, line 4: 4 fields where the header has 3"):
        load_eval_set(path, id_column="id")
    path.write_text('id,text,label\na,"x\ny",l\nb,c,d\n', encoding="utf-8")
    assert load_eval_set(path, id_column="id").line_of(1) == 4


def test_jsonl_strings_may_hold_line_and_paragraph_separators(tmp_path):
    from erroranalysis.checklist.training_log import read_jsonl_log

    path = tmp_path / "eval.jsonl"
    texts = ["a\u2028b", "c\u0085d", "e\u2029f"]
    path.write_text("".join('{"text": "%s", "label": "x"}\r\n' % t for t in texts), encoding="utf-8")
    eval_set = load_eval_set(path)
    assert eval_set.frame["text"].tolist() == texts and eval_set.line_of(2) == 3
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1, "loss": 2.0, "note": "x\u2028y"}\n{"step": 2, "loss": 1.0}\n', encoding="utf-8")
    assert read_jsonl_log(log).signals["loss"].values.tolist() == [2.0, 1.0]
