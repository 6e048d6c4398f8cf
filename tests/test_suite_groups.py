"""The suite's work units under pytest-xdist (tests/conftest.py) name tests that exist, and every file that starts a
local Ray puts those tests in the one "ray" group: two Rays at once on a worker each would fight over the cores,
and test_engines kills Ray actors by name."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import GROUPS, LONGEST_FIRST, work_unit

TESTS = Path(__file__).resolve().parent


def defined(nodeid: str) -> bool:
    file, _, name = nodeid.partition("::")
    path = TESTS.parent / file
    if not path.is_file():
        return False
    if not name:
        return True
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.FunctionDef) and node.name == name for node in tree.body)


def test_every_group_and_longest_unit_names_a_test_that_exists():
    assert [key for key in GROUPS if not defined(key)] == []
    units = set(GROUPS.values()) | {path.relative_to(TESTS.parent).as_posix() for path in TESTS.glob("test_*.py")}
    assert [unit for unit in LONGEST_FIRST if unit not in units] == []


def test_tests_that_start_ray_share_the_ray_group():
    for path in sorted(TESTS.glob("test_*.py")):
        if 'importorskip("ray")' not in path.read_text(encoding="utf-8") or path.name == Path(__file__).name:
            continue
        file = path.relative_to(TESTS.parent).as_posix()
        tests = [node.name for node in ast.parse(path.read_text(encoding="utf-8")).body
                 if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
        assert "ray" in {work_unit(f"{file}::{name}") for name in tests}, file


def test_a_parametrized_test_is_in_its_functions_unit():
    assert work_unit("tests/test_engines.py::test_sinks_keep_hidden_states_as_asked[True-None]") == "ray"
    assert work_unit("tests/test_multilabel.py::test_ray_gives_the_in_process_answers") == "ray"
    assert work_unit("tests/test_multilabel.py::test_other[x]") == "tests/test_multilabel.py"
