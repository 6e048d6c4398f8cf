"""Supervised fine-tuning data as the trainer will see it (`erroranalysis sft-check`): rows in TRL's formats
rendered with the tokenizer's chat template and masked as TRL masks them (or the user's own tokenized rows), and
the findings over each row's tokens: nothing trained, prompt trained, answers cut, EOS missing or masked, double
BOS, template mismatch, labels shifted by hand, empty answers, duplicates, rows over max_length. Pure: no run
directory here (stages/sft_check.py writes one)."""

from erroranalysis.sft import tokenized
from erroranalysis.sft.check import SftResult, check
from erroranalysis.sft.detect import KINDS, MEANINGS
from erroranalysis.sft.params import MODES, SftParams
from erroranalysis.sft.render import ROLE_NAMES, render
from erroranalysis.sft.rows import SftRows, read_rows, rows_of
from erroranalysis.sft.tokenized import TokenizedRow, read_tokenized
from erroranalysis.sft.tokenizer import Tokens, facts, load_tokens
