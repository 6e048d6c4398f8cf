"""What may reach a terminal: user strings with their control and format characters made visible.

A name, label, path or message can come from a run, an eval set, a taxonomy or a labels database, and hold an
escape sequence (ESC[2J clears the screen; others rewrite lines or the window title), a NUL, a zero-width or a
bidi-override character: printed raw, it changes what the user sees. `visible` shows each such character as its
Python escape (`\\x1b`, `\\u202e`), keeping newlines and tabs; the CLI's console and its error line apply it to
everything they print.
"""

from __future__ import annotations

import unicodedata

KEPT = frozenset("\n\t")
HIDDEN = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))  # controls, format, surrogates, private, unassigned, separators


def hidden(char: str) -> bool:
    """Whether `char` is one a terminal would act on or not show: a control, format or line/paragraph separator."""
    return char not in KEPT and unicodedata.category(char) in HIDDEN


def visible(text) -> str:
    """`text` with every hidden character written as its escape (`\\x1b[2J`, `Zoe\\u200b`)."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(_escape(c) if hidden(c) else c for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
