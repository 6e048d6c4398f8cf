"""Who is using the app, established on every script run from one source, and never from what the page sends:

- `proxy`: behind a login proxy (oauth2-proxy, nginx auth_request or basic auth) started with
  `--trusted-user-header X-Forwarded-User --proxy-secret-file FILE`. The proxy sets the user header and the secret
  header (`PROXY_SECRET_HEADER`) on every request it forwards, the websocket's included; Streamlit hands the
  websocket's request headers to the script (st.context.headers). A session is believed only when it carries the
  secret exactly once (compared in constant time) and the user header exactly once: a process that reaches the
  port directly, even from the same machine, cannot choose an identity without the secret file.
- `oidc`: Streamlit's own login (st.login / st.user), when `.streamlit/secrets.toml` has an `[auth]` section.
  The identity is the provider's `email` claim (else `preferred_username`, else `sub`).
- `local`: neither is configured: today's single user on loopback, who may type the name labels are recorded
  under ("Labeling as").

With `proxy` or `oidc` the name cannot be edited in the app, and a session without an identity sees no page.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

PROXY_SECRET_HEADER = "X-Erroranalysis-Proxy-Secret"
OIDC_CLAIMS = ("email", "preferred_username", "sub")
MAX_NAME = 200  # longer "names" are not from a login proxy

NOT_THROUGH_PROXY = ("This app answers only requests that come through its login proxy. Open it at the address "
                     "your team uses to sign in.")
NO_PROXY_USER = "The login proxy sent no user name with this request; sign in again through it."


@dataclass(frozen=True)
class Identity:
    source: str                  # "proxy", "oidc" or "local"
    user: str | None             # None: no identity; the app shows `refusal` and no page
    refusal: str | None = None

    @property
    def editable(self) -> bool:
        """Whether the person may type the name they label as (only without a login)."""
        return self.source == "local"


def source_of(trusted_user_header: str | None, oidc: bool) -> str:
    if trusted_user_header:
        return "proxy"
    return "oidc" if oidc else "local"


def _values(headers: Mapping[str, str], name: str) -> list[str]:
    """Every value of header `name` (Streamlit's headers keep repeats in get_all; a plain mapping has one)."""
    if hasattr(headers, "get_all"):
        return list(headers.get_all(name))
    lowered = {k.lower(): v for k, v in headers.items()}
    return [lowered[name.lower()]] if name.lower() in lowered else []


def from_proxy(headers: Mapping[str, str], user_header: str, secret_sha256: str | None) -> Identity:
    """The identity a request's headers carry, believed only with the proxy's secret."""
    secrets = _values(headers, PROXY_SECRET_HEADER)
    if secret_sha256 is None or len(secrets) != 1:
        return Identity("proxy", None, NOT_THROUGH_PROXY)
    sent = hashlib.sha256(secrets[0].strip().encode("utf-8")).hexdigest()
    if not hmac.compare_digest(sent, secret_sha256):
        return Identity("proxy", None, NOT_THROUGH_PROXY)
    users = [u.strip() for u in _values(headers, user_header)]
    if len(users) != 1 or not users[0] or len(users[0]) > MAX_NAME or not users[0].isprintable():
        return Identity("proxy", None, NO_PROXY_USER)
    return Identity("proxy", users[0])


def from_oidc(user_info: Mapping) -> Identity:
    """The identity Streamlit's login established (st.user), or none before sign-in."""
    if not user_info.get("is_logged_in"):
        return Identity("oidc", None, "Sign in to use the app.")
    for claim in OIDC_CLAIMS:
        value = str(user_info.get(claim) or "").strip()
        if value:
            return Identity("oidc", value[:MAX_NAME])
    return Identity("oidc", None, "The identity provider sent no email, preferred_username or sub claim; the app "
                                  "cannot tell who you are.")


def oidc_configured() -> bool:
    """Whether Streamlit's secrets have an [auth] section (st.login is then available)."""
    import streamlit as st

    try:
        return "auth" in st.secrets
    except Exception:  # no secrets file at all
        return False


def current(cfg, typed_user: str | None) -> Identity:
    """This session's identity for the script run under way (cfg: the AppConfig)."""
    import streamlit as st

    if cfg.blocked:
        return Identity(source_of(cfg.trusted_user_header, False), None, cfg.blocked)
    source = source_of(cfg.trusted_user_header, oidc_configured())
    if source == "proxy":
        return from_proxy(st.context.headers, cfg.trusted_user_header, cfg.proxy_secret_sha256)
    if source == "oidc":
        return from_oidc(st.user.to_dict())
    return Identity("local", (typed_user or cfg.user).strip() or cfg.user)
