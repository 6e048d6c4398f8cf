"""The app behind a real login proxy: Debian's nginx with basic auth in front of `erroranalysis ui
--trusted-user-header X-Forwarded-User --proxy-secret-file FILE --viewers carol`, a real browser through it.

nginx runs as an ordinary process (`nginx -c CONF -p PREFIX -g 'daemon off;'`) with a config generated here around
the deployment's own snippet, deploy/nginx/erroranalysis-proxy.conf (its port and secret path swapped for this
test's). Two users label and the event log names each; one tries to name himself the other through the proxy; a
viewer finds no way to write; a browser that goes to the app's port directly, sending the user header itself, gets
no identity, while the same browser with the proxy's secret does (so the refusal is the secret's doing, not lost
headers).
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from browser import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, free_port, settle, start_app, stop, wait_for
from ui_fixtures import make_run

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SNIPPET = ROOT / "deploy" / "nginx" / "erroranalysis-proxy.conf"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
USERS = ("alice", "bob", "carol")


def ssha(password: str) -> str:
    """An htpasswd entry's hash in the salted SHA-1 form nginx reads ({SSHA}), without the crypt module."""
    salt = os.urandom(8)
    return "{SSHA}" + base64.b64encode(hashlib.sha1(password.encode() + salt).digest() + salt).decode()


def nginx_config(prefix: Path, listen: int, upstream: int, htpasswd: Path, secret_conf: Path) -> Path:
    """nginx.conf for a basic-auth proxy on 127.0.0.1:`listen`, with the deployment's snippet for the rest."""
    snippet = SNIPPET.read_text()
    for old, new in (("127.0.0.1:8501", f"127.0.0.1:{upstream}"),
                     ("/etc/erroranalysis/nginx-proxy-secret.conf", str(secret_conf))):
        assert snippet.count(old) == 1, f"{SNIPPET} no longer has {old!r} once"
        snippet = snippet.replace(old, new)
    (prefix / "snippets").mkdir(parents=True)
    (prefix / "snippets" / "erroranalysis-proxy.conf").write_text(snippet)
    temp = prefix / "temp"
    temp.mkdir()
    paths = "\n".join(f"    {kind}_temp_path {temp / kind};" for kind in ("client_body", "proxy", "fastcgi",
                                                                            "uwsgi", "scgi"))
    conf = prefix / "nginx.conf"
    conf.write_text(f"""
{"user root;" if os.geteuid() == 0 else ""}
worker_processes 1;
pid {prefix / "nginx.pid"};
error_log {prefix / "error.log"} warn;
events {{ worker_connections 256; }}
http {{
    access_log {prefix / "access.log"};
{paths}
    map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}
    map $remote_user $ea_user {{ default $remote_user; }}
    server {{
        listen 127.0.0.1:{listen};
        location / {{
            auth_basic "erroranalysis";
            auth_basic_user_file {htpasswd};
            include snippets/erroranalysis-proxy.conf;
        }}
    }}
}}
""")
    return conf


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """The app and nginx in front of it: {proxy, direct, passwords, secret, labels_db, run}."""
    pytest.importorskip("playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (make browsers)")
    if not Path(NGINX).exists():
        pytest.skip("Debian nginx is not installed (make browsers installs it)")
    tmp = tmp_path_factory.mktemp("team")
    root = tmp / "runs"
    make_run(root / "news", n=160, n_failures=40, seed=0)
    secret = secrets.token_hex(32)
    (tmp / "etc").mkdir()
    secret_file = tmp / "etc" / "proxy-secret"
    secret_file.write_text(secret + "\n")
    secret_file.chmod(0o600)
    secret_conf = tmp / "etc" / "nginx-proxy-secret.conf"
    secret_conf.write_text(f'proxy_set_header X-Erroranalysis-Proxy-Secret "{secret}";\n')
    passwords = {user: secrets.token_urlsafe(12) for user in USERS}
    htpasswd = tmp / "etc" / "htpasswd"
    htpasswd.write_text("".join(f"{user}:{ssha(pw)}\n" for user, pw in passwords.items()))
    labels_db = tmp / "labels.sqlite"

    app_port, proxy_port = free_port(), free_port()
    app = start_app(root, "--open", "news", "--trusted-user-header", "X-Forwarded-User", "--proxy-secret-file",
                    secret_file, "--viewers", "carol", "--labels-db", labels_db, port=app_port)
    prefix = tmp / "nginx"
    conf = nginx_config(prefix, proxy_port, app_port, htpasswd, secret_conf)
    proxy = subprocess.Popen([NGINX, "-e", str(prefix / "error.log"), "-c", str(conf), "-p", str(prefix),
                              "-g", "daemon off;"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    wait_for(f"http://127.0.0.1:{proxy_port}/", proxy, "nginx", ok=(401,))
    yield {"proxy": f"http://127.0.0.1:{proxy_port}", "direct": f"http://127.0.0.1:{app_port}",
           "passwords": passwords, "secret": secret, "labels_db": labels_db, "run": root / "news"}
    stop(proxy)
    stop(app)


@pytest.fixture(scope="module")
def browser(deployment):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def open_app(browser, address: str, *, user: str | None = None, password: str | None = None, headers=None,
             page: str | None = "Label"):
    """A fresh browser context (its own session) on the app; on `page` when the app lets it in."""
    context = browser.new_context(viewport={"width": 1500, "height": 1300},
                                  http_credentials={"username": user, "password": password} if user else None,
                                  extra_http_headers=headers or {})
    tab = context.new_page()
    tab.set_default_timeout(TIMEOUT_MS)
    tab.goto(f"{address}/?run=news")
    tab.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]')
    tab.wait_for_timeout(500)
    if page and not tab.get_by_text("only requests that come through its login proxy").count():
        tab.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=page, exact=True).click()
        tab.get_by_role("heading", name=page, level=1).wait_for()
        settle(tab)
    return context, tab


def sidebar(tab) -> str:
    return tab.locator('[data-testid="stSidebar"]').inner_text()


def create_type_and_assign_cluster(tab, name: str) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    if not tab.get_by_label("Name").first.is_visible():  # the form is folded once a type exists
        tab.locator('[data-testid="stExpander"]').get_by_text("New error type").click()
    tab.get_by_label("Name").first.fill(name)
    settle(tab)
    for attempt in range(3):
        tab.get_by_role("button", name="Create error type").click()
        try:
            tab.get_by_text(f"Created error type “{name}”.").wait_for(timeout=TIMEOUT_MS // 3)
            break
        except PlaywrightTimeout:
            # on a loaded machine a click that lands while the page is redrawn can be dropped by the browser;
            # click again only when no type was made (its name would be listed)
            if attempt == 2 or tab.get_by_text(name, exact=True).count():
                raise
    settle(tab)
    tab.get_by_role("button", name="Assign whole cluster").click()
    tab.get_by_test_id("stToastText").get_by_text("Assigned cluster #").wait_for()
    settle(tab)


def test_without_credentials_nginx_answers_401(deployment):
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(deployment["proxy"] + "/", timeout=10)
    assert info.value.code == 401


def test_two_users_label_under_their_own_names(deployment, browser):
    from erroranalysis.labels import LabelStore

    pw = deployment["passwords"]
    alice_ctx, alice = open_app(browser, deployment["proxy"], user="alice", password=pw["alice"])
    assert "alice" in sidebar(alice) and "Signed in through the login proxy" in sidebar(alice)
    assert not alice.get_by_label("Labeling as").count()  # no name to type
    create_type_and_assign_cluster(alice, "Seen by alice")

    # bob sends X-Forwarded-User: alice himself; nginx replaces it with the name he signed in as
    bob_ctx, bob = open_app(browser, deployment["proxy"], user="bob", password=pw["bob"],
                            headers={"X-Forwarded-User": "alice",
                                     "X-Erroranalysis-Proxy-Secret": "not-the-secret"})
    assert "bob" in sidebar(bob) and "alice" not in sidebar(bob)
    create_type_and_assign_cluster(bob, "Seen by bob")  # the same cluster: bob's change replaces alice's labels
    bob.get_by_role("button", name="Undo").click()      # bob's undo reverts bob's change, never alice's
    settle(bob)

    store = LabelStore(deployment["labels_db"], create=False)
    events = list(reversed(store.events()))
    assert [(e.user, e.action) for e in events] == [
        ("alice", "create_type"), ("alice", "assign"), ("bob", "create_type"), ("bob", "assign"), ("bob", "undo")]
    assert {e.writer for e in events} == {"app"}
    assigned = store.assignments(store.run_key(deployment["run"]))
    assert len(assigned) and set(assigned["updated_by"]) == {"alice"} and set(assigned["error_type"]) == \
        {"Seen by alice"}
    alice_ctx.close()
    bob_ctx.close()


def test_a_viewer_cannot_write(deployment, browser):
    from erroranalysis.labels import LabelStore

    before = len(LabelStore(deployment["labels_db"]).events(limit=None))
    ctx, carol = open_app(browser, deployment["proxy"], user="carol", password=deployment["passwords"]["carol"])
    assert "carol" in sidebar(carol) and "Viewer" in sidebar(carol)
    main = carol.locator('[data-testid="stMain"]')
    main.get_by_text("read labels but not change them").first.wait_for()
    for write in ("Create error type", "Assign whole cluster", "Undo", "Merge clusters"):
        assert not main.get_by_role("button", name=write).count(), write
    carol.locator('[data-testid="stSidebarNav"]').get_by_role("link", name="Slices", exact=True).click()
    carol.get_by_role("heading", name="Slices", level=1).wait_for()
    settle(carol)
    assert not carol.get_by_role("button", name="Make an error type from this slice").count()
    assert len(LabelStore(deployment["labels_db"]).events(limit=None)) == before
    ctx.close()


@pytest.mark.parametrize("headers", [
    {"X-Forwarded-User": "alice"},
    {"X-Forwarded-User": "alice", "X-Erroranalysis-Proxy-Secret": "0" * 64},
])
def test_going_around_the_proxy_gets_no_identity(deployment, browser, headers):
    ctx, tab = open_app(browser, deployment["direct"], headers=headers, page=None)
    tab.get_by_text("only requests that come through its login proxy").wait_for()
    body = tab.locator("body").inner_text()
    assert "news" not in body and "alice" not in body
    assert not tab.locator('[data-testid="stSidebarNav"]').count()
    ctx.close()


def test_the_proxys_headers_do_reach_the_app(deployment, browser):
    """The control for the test above: the same direct connection with the secret is believed, so a refusal
    there comes from the missing secret, not from headers lost on the way."""
    ctx, tab = open_app(browser, deployment["direct"], page=None,
                        headers={"X-Forwarded-User": "dave", "X-Erroranalysis-Proxy-Secret": deployment["secret"]})
    tab.locator('[data-testid="stSidebarNav"]').wait_for()
    assert "dave" in sidebar(tab)
    ctx.close()
