"""Who labels in the app: a login proxy's header believed only with its secret, Streamlit's OIDC login, or the one
local user; viewers and --read-only, enforced by the labels store and hidden in the pages.

The proxy path end to end (nginx, basic auth, a real browser) is tests/test_ui_proxy.py; here the rule itself and
the pages under each identity source, without a browser (AppTest seeds st.user for the OIDC cases).
"""

from __future__ import annotations

import hashlib

import pytest
from app_session import app_env, go, open_app
from streamlit.runtime.context import StreamlitHeaders
from streamlit.testing.v1 import AppTest
from ui_fixtures import make_run

from erroranalysis.labels import LabelStore, ReadOnlyError
from erroranalysis_ui.eaui import identity, labeled, state

SECRET = "0123456789abcdef0123456789abcdef"
DIGEST = hashlib.sha256(SECRET.encode()).hexdigest()
OIDC = {"redirect_uri": "http://localhost:8501/oauth2callback", "cookie_secret": "c" * 32, "client_id": "ea",
        "client_secret": "x", "server_metadata_url": "https://login.example.com/.well-known/openid-configuration"}


def headers(*pairs: tuple[str, str]) -> StreamlitHeaders:
    return StreamlitHeaders(list(pairs))


# -- the proxy rule -------------------------------------------------------------------------------------------


def test_the_proxy_header_is_believed_only_with_the_secret():
    user = ("X-Forwarded-User", "alice")
    assert identity.from_proxy(headers(user, (identity.PROXY_SECRET_HEADER, SECRET)), "X-Forwarded-User",
                               DIGEST) == identity.Identity("proxy", "alice")
    # header names are case-insensitive, as HTTP's are
    assert identity.from_proxy(headers(("x-forwarded-user", "alice"), ("x-erroranalysis-proxy-secret", SECRET)),
                               "X-Forwarded-User", DIGEST).user == "alice"
    refused = [
        headers(user),                                                        # no secret: not through the proxy
        headers(user, (identity.PROXY_SECRET_HEADER, "guess")),               # a wrong secret
        headers(user, (identity.PROXY_SECRET_HEADER, SECRET[:-1])),           # almost the secret
        headers(user, (identity.PROXY_SECRET_HEADER, "guess"), (identity.PROXY_SECRET_HEADER, SECRET)),  # two
        headers(("X_Forwarded_User", "alice"), (identity.PROXY_SECRET_HEADER, SECRET)),  # not the header
        headers(user, ("X-Forwarded-User", "bob"), (identity.PROXY_SECRET_HEADER, SECRET)),  # two users
        headers(("X-Forwarded-User", "  "), (identity.PROXY_SECRET_HEADER, SECRET)),   # an empty name
        headers(("X-Forwarded-User", "a\x00b"), (identity.PROXY_SECRET_HEADER, SECRET)),
    ]
    for sent in refused:
        who = identity.from_proxy(sent, "X-Forwarded-User", DIGEST)
        assert who.user is None and who.refusal, sent.to_dict()
    # the same refusal whether the secret is missing or wrong: nothing to learn by trying
    assert identity.from_proxy(refused[0], "X-Forwarded-User", DIGEST) == \
        identity.from_proxy(refused[1], "X-Forwarded-User", DIGEST)
    # no secret configured: nobody is believed, even with a header
    assert identity.from_proxy(headers(user, (identity.PROXY_SECRET_HEADER, SECRET)), "X-Forwarded-User",
                               None).user is None


def test_the_oidc_identity_is_the_providers_claim():
    assert identity.from_oidc({"is_logged_in": False}).user is None
    assert identity.from_oidc({"is_logged_in": True, "email": "a@x.org", "sub": "1"}).user == "a@x.org"
    assert identity.from_oidc({"is_logged_in": True, "preferred_username": "ann", "sub": "1"}).user == "ann"
    assert identity.from_oidc({"is_logged_in": True, "sub": "1"}).user == "1"
    assert identity.from_oidc({"is_logged_in": True, "name": "Ann"}).user is None


# -- the pages under each source -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("ws")
    make_run(root / "news", n=160, n_failures=40, seed=1)
    return root


@pytest.fixture()
def start(workspace, tmp_path, monkeypatch):
    """start(page, oidc_user=..., **env) -> an AppTest on `page` of run news; oidc_user (a dict for st.user)
    configures the OIDC login; env sets ERRORANALYSIS_<NAME> variables."""
    def _start(page: str = "label", oidc_user: dict | None = None, **env) -> AppTest:
        app_env(monkeypatch, workspace, tmp_path / "labels.sqlite", **{"user": None, **env})

        def login(at: AppTest) -> None:
            at.secrets["auth"] = OIDC
            at.user = oidc_user

        at = open_app(run="news", setup=None if oidc_user is None else login)
        return at if page == "runs" or at.error else go(at, page)

    return _start


def labels_of(at: AppTest) -> list[str]:
    return [b.label for b in list(at.button) + list(at.get("form_submit_button"))]


def shows_no_workspace(at: AppTest) -> None:
    """Nothing of the workspace: no run picker, no page, no run name."""
    assert not at.selectbox and not at.title[1:] and not at.dataframe
    assert "news" not in " ".join(str(m.value) for m in list(at.markdown) + list(at.caption))


def test_proxy_mode_without_the_proxy_shows_nothing(start, tmp_path):
    """A request that did not come through the proxy (AppTest sends no headers, as a direct connection without
    the secret): a refusal, no page, and no way to type a name."""
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    at = start(trusted_user_header="X-Forwarded-User", proxy_secret_file=str(secret))
    assert at.error[0].value == identity.NOT_THROUGH_PROXY
    shows_no_workspace(at)
    assert not at.text_input


def test_a_trusted_header_without_a_secret_lets_nobody_in(start):
    at = start(trusted_user_header="X-Forwarded-User")
    assert "no proxy secret" in at.error[0].value
    shows_no_workspace(at)


def test_oidc_before_sign_in(start):
    at = start(oidc_user={"is_logged_in": False})
    assert "Sign in" in labels_of(at)
    shows_no_workspace(at)


def test_oidc_labels_under_the_signed_in_identity(start, tmp_path):
    at = start(oidc_user={"is_logged_in": True, "email": "alice@example.com", "sub": "42"})
    assert not at.error, [e.value for e in at.error]
    assert not [t for t in at.text_input if t.key == state.USER]  # no "Labeling as" box
    assert any("alice@example.com" in m.value.replace("\\", "") for m in at.sidebar.markdown)
    assert "Sign out" in [b.label for b in at.sidebar.button]
    at.session_state[state.USER] = "mallory"  # what a name typed into the page would set: ignored
    at.text_input(key=state.NEW_TYPE_NAME).set_value("Sarcasm read literally")
    next(b for b in at.get("form_submit_button") if b.label == "Create error type").click().run()
    events = LabelStore(tmp_path / "labels.sqlite", create=False).events()
    assert [(e.user, e.writer, e.action) for e in events] == [("alice@example.com", "app", "create_type")]


def test_a_viewer_sees_the_labels_and_no_way_to_change_them(start, tmp_path):
    writer = LabelStore(tmp_path / "labels.sqlite", user="alice")
    etype = writer.create_error_type("Topic words of another class")
    at = start(oidc_user={"is_logged_in": True, "email": "carol@example.com"}, viewers="carol@example.com")
    assert "Topic words of another class" in " ".join(m.value for m in at.markdown)
    buttons = labels_of(at)
    for write in ("Create error type", "Undo", "Save", "Merge clusters", "Label is wrong", "Not an error"):
        assert write not in buttons, write
    assert not [b for b in buttons if b.startswith("Assign")]
    assert any("viewer" in c.value.lower() for c in at.caption)
    for page, write in (("review", "Suggest error types"), ("slices", "Make an error type from this slice")):
        at.switch_page(f"views/{page}.py").run()
        assert not at.exception and write not in labels_of(at), page
    at.switch_page("views/taxonomy.py").run()
    assert [b.label for b in at.get("download_button")] == ["JSON", "CSV", "Markdown report"]  # reading is fine
    # and the store the app hands this session refuses writes itself
    store = labeled.store(str(tmp_path / "labels.sqlite"), False, ("carol@example.com",)).with_user("carol@example.com")
    with pytest.raises(ReadOnlyError, match="viewer"):
        store.assign("news", ["ex000001"], etype.id)
    assert len(writer.events()) == 1


def test_a_read_only_app_on_a_workspace_without_labels(start, tmp_path):
    """--read-only: every page works, nothing can be written, and no labels database is created."""
    at = start(read_only="1")
    assert not at.error and not [b for b in labels_of(at) if b.startswith(("Assign", "Create", "Undo"))]
    assert any("read" in c.value.lower() for c in at.caption)
    for page in ("clusters", "taxonomy", "review", "slices", "runs"):
        at.switch_page(f"views/{page}.py").run()
        assert not at.exception and not at.error, (page, [e.value for e in at.error])
    assert not (tmp_path / "labels.sqlite").exists()
    store = labeled.store(str(tmp_path / "labels.sqlite"), True, ())
    with pytest.raises(ReadOnlyError, match="read-only"):
        store.create_error_type("Anything")
    assert not (tmp_path / "labels.sqlite").exists()


def test_a_read_only_app_reads_the_labels_there(start, tmp_path):
    LabelStore(tmp_path / "labels.sqlite", user="alice").create_error_type("Sport read as business")
    at = start(read_only="1")
    assert "Sport read as business" in " ".join(m.value for m in at.markdown)
    assert "Create error type" not in labels_of(at)
    with pytest.raises(ReadOnlyError):
        labeled.store(str(tmp_path / "labels.sqlite"), True, ()).with_user("tester").create_error_type("x")


def test_a_single_local_user_still_types_a_name(start, tmp_path):
    at = start(user="ann")
    box = at.text_input(key=state.USER)
    assert box.value == "ann" and box.label == "Labeling as"
    box.set_value("ann2").run()
    at.text_input(key=state.NEW_TYPE_NAME).set_value("Short texts")
    next(b for b in at.get("form_submit_button") if b.label == "Create error type").click().run()
    assert [e.user for e in LabelStore(tmp_path / "labels.sqlite", create=False).events()] == ["ann2"]


def test_apply_taxonomy_as_a_viewer_writes_nothing(workspace, tmp_path):
    """The Review page's one write that also touches the run: refused by the library before the run changes."""
    from erroranalysis import stages
    from erroranalysis.rundir import MANIFEST, Run

    store = LabelStore(tmp_path / "labels.sqlite", user="alice")
    etype = store.create_error_type("Sport read as business")
    run = Run.open(workspace / "news")
    table = stages.example_table(run, store)
    store.assign(store.run_key(run.path), table[~table["correct"]]["example_id"].head(5).tolist(), etype.id)
    doc = stages.build_taxonomy(run, store)
    before = (run.path / MANIFEST).read_bytes()
    viewer = LabelStore(tmp_path / "labels.sqlite", viewers=["carol"]).with_user("carol")
    with pytest.raises(ReadOnlyError, match="viewer"):
        stages.apply_taxonomy(doc, run.path, store=viewer)
    assert (run.path / MANIFEST).read_bytes() == before and len(store.events()) == 2
