"""The precision a run trains in, as symbert-pretrain and symbert-glue choose and check it (--precision)."""

import os

from ..cli import UserError

PRECISIONS = ("auto", "bf16", "fp16", "fp32")
LAUNCHER_PRECISION_VARIABLE = "ACCELERATE_MIXED_PRECISION"  # accelerate launch --mixed_precision (or its config)
# the launcher's, as this process started with it (transformers 4.x's TrainingArguments writes the variable)
LAUNCHER_PRECISION = os.environ.get(LAUNCHER_PRECISION_VARIABLE, "no")


def precision_for(requested: str, device: str, bf16_supported: bool, launcher: str = "no") -> str:
    """The precision a run trains in, "bf16", "fp16" or "fp32", on a `device` ("cuda", "cpu", ...): `requested`
    (--precision), or for "auto" the launcher's mixed precision if it names one (accelerate launch --mixed_precision
    or its config file: `launcher`), else bf16 or fp16 on CUDA and fp32 elsewhere. Refused, in one line, where the
    run would train in another precision than the one it records: fp16 on a CPU (accelerate then trains in fp32),
    bf16 where TrainingArguments refuses it, a launcher that asks for another mixed precision (accelerate applies it
    whenever the Trainer's bf16 and fp16 are both off)."""
    launcher = launcher.lower()
    named_by_launcher = launcher not in ("no", "")
    what, instead = f"precision {requested!r}", "--precision fp32"
    if requested == "auto" and named_by_launcher:
        requested = launcher
        what = (
            f"the launcher's mixed precision {launcher!r} ({LAUNCHER_PRECISION_VARIABLE}, which --precision auto takes)"
        )
        instead = "accelerate launch --mixed_precision no"
    elif requested == "auto":
        requested = ("bf16" if bf16_supported else "fp16") if device == "cuda" else "fp32"
    if requested not in PRECISIONS[1:]:
        raise UserError(f"{what} is not supported; allowed: {', '.join(PRECISIONS)}; use {instead}.")
    if requested == "fp16" and device == "cpu":
        raise UserError(
            f"{what} cannot run on the CPU: accelerate applies fp16 autocast on GPUs only, so the run would train in "
            f"fp32; use {instead}, or bf16."
        )
    if requested == "bf16" and not bf16_supported:
        needs = "needs --use_cpu true" if device == "cpu" else f"is not supported by this {device} device"
        raise UserError(f"{what}: bf16 on the {device} {needs}; or use {instead}.")
    if named_by_launcher and launcher != requested:
        raise UserError(
            f"{what} disagrees with the launcher's mixed precision {launcher!r} ({LAUNCHER_PRECISION_VARIABLE}, from "
            f"accelerate launch --mixed_precision or its config file); give both the same, e.g. --precision "
            f"{launcher} or accelerate launch --mixed_precision {'no' if requested == 'fp32' else requested}."
        )
    return requested
