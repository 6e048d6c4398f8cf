"""Who may write labels, and what kind of writer made each change.

The store enforces this itself, so a page that forgets to hide a button still cannot write:

- a store opened `read_only=True` (the app's `--read-only`) refuses every change;
- a user named in `viewers` may read but not change anything;
- every event records, beside the user, the kind of writer that made it: `app` (a person in the app, under the
  identity the app established), `cli` (a command or a script, trusted as the OS user who runs it), `suggestion`
  (apply-taxonomy) or `callback` (the training callback).

    store = LabelStore(db, user="alice", writer="app", viewers={"bob"})
    store.with_user("bob").can_write       # False: bob is a viewer
    store.with_user("bob").assign(...)     # raises ReadOnlyError naming bob and the database
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from erroranalysis.core.errors import UserError
from erroranalysis.core.validation import check_param
from erroranalysis.labels.fields import fold_name

WRITERS = ("app", "cli", "suggestion", "callback")


class ReadOnlyError(UserError):
    """A change refused because the store is read-only or its user is a viewer."""


def default_user() -> str:
    """The name events are recorded under: $ERRORANALYSIS_USER, else the login name."""
    name = os.environ.get("ERRORANALYSIS_USER", "").strip()
    if name:
        return name
    try:
        return getpass.getuser() or "unknown"
    except Exception:  # no login name in some containers
        return "unknown"


def check_writer(writer: str) -> str:
    check_param("writer", writer, writer in WRITERS, f"one of {', '.join(WRITERS)}")
    return writer


@dataclass(frozen=True)
class Access:
    """Whether the store may change anything, and for whom. Viewer names are compared case-insensitively."""

    read_only: bool = False
    viewers: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def of(cls, read_only: bool = False, viewers: Iterable[str] = ()) -> Access:
        if isinstance(viewers, str):
            viewers = [v for v in viewers.split(",")]
        return cls(bool(read_only), frozenset(fold_name(v) for v in viewers if str(v).strip()))

    def refusal(self, user: str, path) -> str | None:
        """Why `user` may not write (one line), or None when they may."""
        if self.read_only:
            return f"{path} is open read-only: labels can be read here but not changed."
        if fold_name(user) in self.viewers:
            return f"{user!r} is a viewer of {path}: viewers may read labels but not change them."
        return None
