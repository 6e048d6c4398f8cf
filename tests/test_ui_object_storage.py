"""The app on object storage: `erroranalysis ui s3://bucket/runs/` lists the runs committed there, opens each from a
local mirror fetched once per commit, and every page works as on a local run, in Chromium, against a real S3 server
(moto in server mode on 127.0.0.1). The runs are made by the real stages (ui_fixtures.make_run) and published the
way `--out s3://...` publishes them (`rundir.remote.publish`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from object_store import s3  # noqa: F401 (the fixture)
from typer.testing import CliRunner

from erroranalysis.cli.app import app as cli_app

PREFIX = "s3://evals/team-runs"


def publish(local: Path, key: str) -> None:
    from erroranalysis.core.storage import ObjectPath
    from erroranalysis.rundir import remote

    url = ObjectPath(f"{PREFIX}/{key}")
    remote.publish(local, url, remote.remote_manifest(url))


@pytest.fixture(scope="module")
def published(s3, tmp_path_factory):  # noqa: F811
    """Two finished runs under the prefix, one a level down (a group), and a third kept aside to publish later."""
    from ui_fixtures import make_run

    root = tmp_path_factory.mktemp("made")
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ERRORANALYSIS_CACHE_DIR", str(cache))
        made = {name: make_run(root / name, n=n, n_failures=n // 5, seed=seed).path
                for name, n, seed in (("a", 200, 0), ("b", 160, 1), ("a2", 240, 2))}
        publish(made["a"], "a")
        publish(made["b"], "group/b")
        yield made, cache


def test_runs_are_listed_by_their_commit_and_fetched_once_per_commit(published, monkeypatch):
    from erroranalysis.core.storage import ObjectPath
    from erroranalysis.rundir import Run, remote, remote_tree

    made, cache = published
    monkeypatch.setenv("ERRORANALYSIS_CACHE_DIR", str(cache))
    url = ObjectPath(PREFIX)
    assert remote_tree.list_runs(url) == ["a", "group/b"]
    fetched = []
    real_fetch = remote.fetch
    monkeypatch.setattr(remote, "fetch", lambda *a, **k: fetched.append(a[0]) or real_fetch(*a, **k))
    mirror = remote_tree.mirror_root(url)
    local = remote_tree.open_run(url, "a", mirror)
    assert Run.open(local).predictions().equals(Run.open(made["a"]).predictions())
    remote_tree.open_run(url, "a", mirror)
    assert len(fetched) == 1  # the mirror holds the committed generation: nothing fetched again
    publish(made["a2"], "a")  # published again: a new commit
    try:
        local = remote_tree.open_run(url, "a", mirror)
        assert len(fetched) == 2 and len(Run.open(local).predictions()) == 240
    finally:
        publish(made["a"], "a")


def test_the_command_checks_the_prefix_and_the_labels_database_before_starting(published, tmp_path):
    runner = CliRunner()
    no_db = runner.invoke(cli_app, ["ui", PREFIX])
    assert no_db.exit_code == 2 and "pass --labels-db PATH" in no_db.output
    empty = runner.invoke(cli_app, ["ui", "s3://evals/nothing-here", "--labels-db", str(tmp_path / "l.sqlite")])
    assert empty.exit_code == 2 and "no runs here" in empty.output
    wrong = runner.invoke(cli_app, ["ui", PREFIX, "--labels-db", str(tmp_path / "l.sqlite"), "--open", "zz"])
    assert wrong.exit_code == 2 and "not a run under" in wrong.output and "group/b" in wrong.output


@pytest.mark.slow
def test_every_page_of_every_run_opens_in_chromium_from_object_storage(published, tmp_path, monkeypatch):
    from browser import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, free_port, settle, start_app, stop
    from test_ui_browser import PAGES, _goto, _problems

    pytest.importorskip("playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (make browsers)")
    from playwright.sync_api import sync_playwright

    from erroranalysis.core.storage import ObjectPath
    from erroranalysis.rundir import remote_tree

    made, cache = published
    monkeypatch.setenv("ERRORANALYSIS_CACHE_DIR", str(tmp_path / "app-cache"))  # the app's own, empty mirror
    port = free_port()
    proc = start_app(PREFIX, "--labels-db", tmp_path / "labels.sqlite", "--user", "s3", port=port)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1400})
            page.set_default_timeout(TIMEOUT_MS)
            crashes = {}
            for run in ("a", "group/b"):
                page.goto(f"http://localhost:{port}/?run={run}")
                page.get_by_role("heading", name="Runs", level=1).wait_for()
                settle(page)
                assert PREFIX in page.locator("body").inner_text()
                for link in PAGES:
                    if link != "Runs":
                        _goto(page, link, pause_ms=300)
                    if found := _problems(page):
                        crashes[f"{run}/{link}"] = found
            assert not crashes, crashes
            mirror = remote_tree.mirror_root(ObjectPath(PREFIX))
            assert sorted(p.parent.relative_to(mirror).as_posix() for p in mirror.rglob("manifest.json")) == \
                ["a", "group/b"]
            before = json.loads((mirror / "a" / "manifest.json").read_text())["objects"]["generation"]
            publish(made["a2"], "a")  # a teammate publishes run a again: the app shows the new commit
            page.goto(f"http://localhost:{port}/?run=a")
            page.get_by_role("heading", name="Runs", level=1).wait_for()
            settle(page)
            _goto(page, "Overview")
            assert not _problems(page)
            after = json.loads((mirror / "a" / "manifest.json").read_text())["objects"]["generation"]
            assert after != before
            browser.close()
    finally:
        stop(proc)
        publish(made["a"], "a")
