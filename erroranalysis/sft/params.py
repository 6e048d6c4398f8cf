"""The parameters of `erroranalysis sft-check`, declared once (the CLI, the Python API and the app take them)."""

from __future__ import annotations

from dataclasses import dataclass

from erroranalysis.core.params import Choice, File, Int, Params, Text, param

# What carries a label: TRL's defaults (completion-only for prompt/completion rows, every token otherwise), or one
# of its switches. Each value is its own flag on the command line (`--assistant-only`), "trl" is the default.
MODES = ("trl", "assistant-only", "completion-only", "all-tokens")

# SFTConfig.max_length's default in TRL
TRL_MAX_LENGTH = 1024


@dataclass(frozen=True)
class SftParams(Params):
    """How the trainer will see the rows: the masking mode, the longest sequence, the user's own tokenized rows."""

    mode: str = param("trl", Choice(*MODES), "Which tokens carry a label: TRL's defaults (completion-only for "
                      "prompt/completion rows, every token for messages and text), or the mode the switch names "
                      "(TRL's assistant_only_loss, completion_only_loss, neither).", flag="--mode", switches=True,
                      panel="Masking")
    max_length: int | None = param(TRL_MAX_LENGTH, Int(1), "Longest sequence the trainer keeps (TRL's max_length); "
                                   "longer rows are cut from the end.", none="no truncation",
                                   none_flag="--no-truncation", none_help="Keep every row whole (TRL's "
                                   "max_length=None).", panel="Masking")
    tokenized: str | None = param(None, File(), "The rows as your pipeline tokenized them (input_ids, labels, "
                                  "optional attention_mask): Parquet, JSONL or a save_to_disk folder; row i is row i "
                                  "of --data. Checked instead of a rendering of ours.", none="render --data with the "
                                  "tokenizer as TRL does", panel="Input")
    source_column: str | None = param(None, Text(), "Column naming each row's source dataset: trained tokens are "
                                      "counted per source (the data mixture as the loss sees it).",
                                      none="no per-source counts", panel="Input")

    def effective_mode(self, fmt: str) -> str:
        """The mode for rows of format `fmt` ("messages", "prompt_completion", "text"): "trl" resolved as TRL does
        (completion_only_loss=None is True for prompt/completion data; assistant_only_loss is False)."""
        if self.mode != "trl":
            return self.mode
        return "completion-only" if fmt == "prompt_completion" else "all-tokens"
