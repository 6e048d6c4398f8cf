"""Rows rendered and masked the way TRL's SFTTrainer prepares them (trl 1.x `_prepare_dataset`), before truncation.

- `messages`: the chat template renders the conversation, tokenized without special tokens (what
  `apply_chat_template(tokenize=True)` does); every token is trained, or with assistant-only loss the template's
  `{% generation %}` blocks (`return_assistant_tokens_mask`). completion_only_loss does nothing to such rows.
- `prompt`/`completion`: the prompt alone (with the generation prompt, when conversational) and prompt + completion
  are tokenized; the completion starts where the two diverge (`common_prefix_length`); plain completions get the EOS
  token appended first, as TRL's `add_eos` does. completion_only_loss (TRL's default here) trains the completion.
- `text`: EOS appended, tokenized with the tokenizer's special tokens, every token trained.

Beside the ids and the mask, each token gets a role, so the checks can say what a label lands on: the template's own
text, a system or user message (the prompt), the answer (assistant text and the end-of-turn token after it), text.
Roles come from finding each message's content in the rendered text; tokens the search cannot place are TEMPLATE.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from erroranalysis.core.errors import DataError

TEMPLATE, SYSTEM, PROMPT, ANSWER, TEXT = 0, 1, 2, 3, 4
ROLE_NAMES = {TEMPLATE: "template", SYSTEM: "system", PROMPT: "prompt", ANSWER: "answer", TEXT: "text"}
BATCH = 512  # rows per tokenizer call (the fast tokenizer works a batch at a time)


@dataclass
class Encoded:
    """One row as the trainer will see it, before truncation: ids, which carry a label, each token's role, and the
    text it was tokenized from with each token's character span (None for rows given as ids)."""

    ids: np.ndarray
    trained: np.ndarray
    roles: np.ndarray
    text: str | None = None
    offsets: np.ndarray | None = None


def render(rows, tokens, mode: str) -> list[Encoded]:
    """Every row of `rows` (SftRows) rendered and masked for `mode` (SftParams.effective_mode of the format)."""
    if mode == "assistant-only" and not rows.conversational:
        raise DataError(f"{rows.path}: --assistant-only needs conversational rows (messages, or prompt/completion "
                        "as lists of messages), and these are plain text; TRL refuses assistant_only_loss for them; "
                        "use --completion-only or --all-tokens.")
    out: list[Encoded] = []
    for start in range(0, len(rows), BATCH):
        stop = min(start + BATCH, len(rows))
        if rows.conversational:
            out.extend(_conversations(rows, tokens, mode, start, stop))
        elif rows.format == "prompt_completion":
            out.extend(_plain_pairs(rows, tokens, mode, start, stop))
        else:
            out.extend(_texts(rows.texts[start:stop], tokens))
    return out


def _check_template(rows, tokens) -> None:
    if not tokens.has_template:
        raise DataError(f"{rows.path}: conversational rows, but the tokenizer at {tokens.path} has no chat template; "
                        "pass the tokenizer the model is trained with (its tokenizer_config.json holds the template).")


def _conversations(rows, tokens, mode: str, start: int, stop: int) -> list[Encoded]:
    _check_template(rows, tokens)
    tok = tokens.tokenizer
    convs = rows.conversations[start:stop]
    texts = _render(tok, convs, rows, start)
    # the Rust tokenizer itself, as the fast tokenizer's __call__ runs it, without building Python dicts per row
    enc = tok.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
    masks = None
    if mode == "assistant-only" and tokens.generation_tags:
        got = tok.apply_chat_template(convs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        masks = got["assistant_masks"]
    lengths = rows.prompt_lengths[start:stop] if rows.prompt_lengths is not None else None
    stop_texts = tuple(tok.convert_ids_to_tokens(sorted(tokens.stop_ids)))
    prompt_ids = None
    if lengths is not None:
        heads = [conv[:n] for conv, n in zip(convs, lengths)]
        prompt_ids = tok(_render(tok, heads, rows, start, generation_prompt=True),
                         add_special_tokens=False)["input_ids"]
    out = []
    for i, conv in enumerate(convs):
        ids = np.asarray(enc[i].ids, dtype=np.int64)
        offsets = np.asarray(enc[i].offsets, dtype=np.int64).reshape(-1, 2)
        roles = token_roles(texts[i], offsets, ids, conv, tokens.stop_ids, lengths[i] if lengths else None,
                            stop_texts)
        trained = np.ones(len(ids), dtype=bool)
        if prompt_ids is not None and mode in ("completion-only", "assistant-only"):
            trained[:common_prefix(prompt_ids[i], enc[i].ids)] = False
        if mode == "assistant-only":
            trained &= np.asarray(masks[i], dtype=bool) if masks is not None else roles == ANSWER
        out.append(Encoded(ids, trained, roles, texts[i], offsets))
    return out


def _render(tok, convs, rows, start: int, generation_prompt: bool = False) -> list[str]:
    try:
        return tok.apply_chat_template(convs, tokenize=False, add_generation_prompt=generation_prompt)
    except Exception as exc:  # a Jinja template raises its own errors (raise_exception) on rows it rejects
        line = _first_failing(tok, convs, rows, start, generation_prompt)
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DataError(f"{rows.path}, line {line}: the chat template cannot render this conversation ({first}); "
                        "fix the roles or order of its messages.") from None


def _first_failing(tok, convs, rows, start: int, generation_prompt: bool) -> int:
    for i, conv in enumerate(convs):
        try:
            tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=generation_prompt)
        except Exception:
            return int(rows.lines[start + i])
    return int(rows.lines[start])


def common_prefix(a, b) -> int:
    """TRL's common_prefix_length: where the prompt's tokens and the whole row's part."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def token_roles(text: str, offsets: np.ndarray, ids: np.ndarray, conv: list[dict], stop_ids,
                prompt_length: int | None = None, stop_texts: tuple[str, ...] = ()) -> np.ndarray:
    """Each token's role: the message whose content holds the token's last character (searched in order in the
    rendered text), an answer extended to the end-of-turn token right after it; TEMPLATE elsewhere. Messages of a
    conversational prompt are PROMPT whatever their role (few-shot answers in a prompt are not the answer)."""
    chars = np.zeros(len(text) + 1, dtype=np.int8)
    cursor = 0
    for k, message in enumerate(conv):
        role = message["role"]
        in_prompt = prompt_length is not None and k < prompt_length
        code = ANSWER if role == "assistant" and not in_prompt else SYSTEM if role == "system" else PROMPT
        at, size = _find(text, message["content"], cursor)
        if at < 0 and code == ANSWER and stop_texts:  # an empty answer: its end-of-turn token is what it trains
            at, size = _next_stop(text, stop_texts, cursor)
        if at < 0:
            continue
        chars[at:at + size] = code
        cursor = at + size
        cursor += next((len(s) for s in stop_texts if text.startswith(s, cursor)), 0)  # past its end-of-turn
    if len(ids) == 0:
        return np.zeros(0, dtype=np.int8)
    last = np.where(offsets[:, 1] > offsets[:, 0], offsets[:, 1] - 1, offsets[:, 0])
    roles = chars[np.clip(last, 0, len(text))]
    return extend_answers(roles, ids, stop_ids)


def _next_stop(text: str, stop_texts: tuple[str, ...], cursor: int) -> tuple[int, int]:
    found = [(at, len(s)) for s in stop_texts if (at := text.find(s, cursor)) >= 0]
    return min(found) if found else (-1, 0)


def _find(text: str, content: str, cursor: int) -> tuple[int, int]:
    if not content.strip():
        return -1, 0
    at = text.find(content, cursor)
    if at >= 0:
        return at, len(content)
    stripped = content.strip()  # templates that trim the content
    at = text.find(stripped, cursor)
    return at, len(stripped)


def extend_answers(roles: np.ndarray, ids: np.ndarray, stop_ids) -> np.ndarray:
    """An answer includes the end-of-turn (or EOS) token right after it: that is the token that teaches stopping."""
    if len(roles) < 2 or not stop_ids:
        return roles
    roles = roles.copy()
    follows = (roles[:-1] == ANSWER) & (roles[1:] == TEMPLATE) & stop_mask(ids[1:], stop_ids)
    roles[1:][follows] = ANSWER
    return roles


def stop_mask(ids: np.ndarray, stop_ids) -> np.ndarray:
    """Which of `ids` are stop tokens (one or two ids: a comparison each beats np.isin on short rows)."""
    out = np.zeros(len(ids), dtype=bool)
    for stop in stop_ids:
        out |= ids == stop
    return out


def _plain_pairs(rows, tokens, mode: str, start: int, stop: int) -> list[Encoded]:
    tok = tokens.tokenizer
    eos = tok.eos_token or ""
    prompts = rows.prompts[start:stop]
    completions = rows.completions[start:stop]
    if rows.texts is None and eos:  # TRL's add_eos (which appends to a text column instead, when there is one)
        completions = [c if c.endswith(eos) else c + eos for c in completions]
    joined = [p + c for p, c in zip(prompts, completions)]
    prompt_ids = tok(prompts)["input_ids"]
    enc = tok(joined, return_offsets_mapping=True)
    out = []
    for i in range(len(joined)):
        ids = np.asarray(enc["input_ids"][i], dtype=np.int64)
        offsets = np.asarray(enc["offset_mapping"][i], dtype=np.int64).reshape(-1, 2)
        cut = common_prefix(prompt_ids[i], enc["input_ids"][i])
        roles = np.full(len(ids), ANSWER, dtype=np.int8)
        roles[:cut] = PROMPT
        trained = np.ones(len(ids), dtype=bool)
        if mode == "completion-only":
            trained[:cut] = False
        out.append(Encoded(ids, trained, roles, joined[i], offsets))
    return out


def _texts(texts: list[str], tokens) -> list[Encoded]:
    tok = tokens.tokenizer
    eos = tok.eos_token or ""
    texts = [t if not eos or t.endswith(eos) else t + eos for t in texts]
    enc = tok(texts, return_offsets_mapping=True)
    out = []
    for i, text in enumerate(texts):
        ids = np.asarray(enc["input_ids"][i], dtype=np.int64)
        offsets = np.asarray(enc["offset_mapping"][i], dtype=np.int64).reshape(-1, 2)
        out.append(Encoded(ids, np.ones(len(ids), dtype=bool), np.full(len(ids), TEXT, dtype=np.int8), text, offsets))
    return out
