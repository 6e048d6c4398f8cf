"""Where and how a model runs: the device, the precision, the batch size, remote code. Declared once and shared by
every parameter dataclass that loads a model (classification, generation, overfit, the doctor)."""

from __future__ import annotations

from dataclasses import dataclass

from erroranalysis.core.params import Choice, Flag, Int, Rule, Spec

PRECISIONS = ("auto", "fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda", "mps")


@dataclass(frozen=True)
class DeviceName(Rule):
    """auto, cpu, cuda, cuda:N or mps."""

    def ok(self, value) -> bool:
        if not isinstance(value, str):
            return False
        kind, _, index = value.partition(":")
        return value in DEVICES or (kind == "cuda" and index.isdigit())

    def describe(self) -> str:
        return "one of auto, cpu, cuda, cuda:N, mps"


DEVICE = Spec("auto", DeviceName(), "auto (cuda, mps, cpu), cpu, cuda, cuda:N or mps.")
PRECISION = Spec("auto", Choice(*PRECISIONS),
                 "auto (bf16 on CUDA, fp32 elsewhere), fp32 or bf16; the manifest records what ran.")
TRUST_REMOTE_CODE = Spec(False, Flag(), "Allow code shipped with the checkpoint to run.")
BATCH_SIZE = Spec(None, Int(1), "Examples per forward pass.",
                  none="on a CPU, batches of up to --max-tokens padded tokens and 128 examples; on a GPU 32 "
                       "examples; 16 for generation")

MAX_TOKENS = Spec(None, Int(0), "Padded tokens per forward pass, at most (0: no budget).",
                  none="on a CPU 2,048 in fp32 and 4,096 in bf16 when --batch-size is not given")
MAX_LENGTH = Spec(256, Int(2), "Tokens per example; longer texts are cut and flagged.")


def check_device(name) -> None:
    """The device rule, for functions that take a device directly."""
    DEVICE.check("device", name)


def check_precision(name) -> None:
    PRECISION.check("precision", name)
