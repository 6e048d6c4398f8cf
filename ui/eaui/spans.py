"""A training row's text as Markdown with its trained spans highlighted (the Training data page): every piece of
user text escaped (no markup, links, HTML or math reaches the page), newlines kept, each span's state shown by
Streamlit's own background colours."""

from __future__ import annotations

MASKED, TRAINED, CUT = 0, 1, 2  # erroranalysis.sft.check's segment states
STYLE = {TRAINED: ":green-background[{}]", CUT: ":red-background[~~{}~~]", MASKED: ":gray[{}]"}
SPECIAL = "\\`*_{}[]()#+-.!|~<>$:"


def escape(text: str) -> str:
    """Markdown-escaped text on one line (the caller splits lines): every character Markdown or a directive acts
    on gets a backslash; runs of spaces stay visible."""
    out = "".join("\\" + c if c in SPECIAL else c for c in text)
    return out.replace("  ", " \u00a0").replace("\t", " \u00a0 \u00a0")


def row_markdown(segments, states, limit: int = 6000) -> str:
    """The segments as Markdown, each line of each span wrapped in its state's style; text past `limit` characters
    is left out (said at the end)."""
    parts, used = [], 0
    for segment, state in zip(segments, states):
        segment = str(segment)
        if used + len(segment) > limit:
            segment = segment[:max(0, limit - used)]
        used += len(segment)
        lines = segment.split("\n")
        for k, line in enumerate(lines):
            if line.strip():
                parts.append(STYLE.get(int(state), "{}").format(escape(line)))
            elif line:
                parts.append(escape(line))
            if k < len(lines) - 1:
                parts.append("  \n")
        if used >= limit:
            parts.append(" … (cut here for display)")
            break
    return "".join(parts)
