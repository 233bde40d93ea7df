"""Distillation toward a teacher (`symbert-pretrain --teacher PATH`): a SymBERT model, typically converted from the
teacher by symbert-convert (`--init_from`), trained to reproduce the teacher's hidden states (and its masked-LM
logits when the teacher has an MLM head) on the run's masked blocks, with everything pre-training has (recipes,
streamed and prepared data, workers, exact resume, DDP). The teacher runs without gradients inside the training step,
so its time is in the run's tokens/s."""

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, BertConfig, BertForMaskedLM, BertModel, PreTrainedModel

from .. import SymBertConfig, SymBertForMaskedLM, SymBertModel
from ..cli import UserError, missing_local_path
from ..files import model_card_license, sentence_transformers_files
from ..modeling_symbert import _labelled_positions

CONVERSION_FILE = "conversion.json"  # symbert-convert's record of how a model was made from BERT
# the teacher's fields that must equal the student's: the tokens it reads and the states it is compared on
MATCHED_FIELDS = ("vocab_size", "hidden_size", "num_attention_heads", "num_hidden_layers")
# what --config_overrides may change in an --init_from model (its architecture is the folder's)
INIT_OVERRIDABLE = (
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "sparse_prediction",
    "max_predictions_per_seq",
)


def initial_config(path: str, overrides: dict) -> SymBertConfig:
    """The --init_from folder's config, with the overrides that do not change its architecture; one line naming the
    others, which are not applied."""
    if missing := missing_local_path(path):
        raise missing
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
    except (OSError, ValueError) as error:
        raise UserError(f"--init_from {path!r} is not a model folder with a readable config.json ({error}).") from error
    if not isinstance(config, SymBertConfig):
        raise UserError(
            f"--init_from {path!r} is a {config.model_type!r} model, not a SymBERT one; convert a BERT first "
            "(symbert-convert BERT OUTPUT --attention_type T)."
        )
    ignored = sorted(key for key in overrides if key not in INIT_OVERRIDABLE and key != "attention_type")
    if ignored:
        print(f"--init_from {path}: the model's config is the folder's; not applied from config_overrides: {ignored}")
    for key in INIT_OVERRIDABLE:
        if key in overrides:
            setattr(config, key, overrides[key])
    config.validate()
    return config


def initial_model(path: str, config: SymBertConfig) -> SymBertForMaskedLM:
    """The --init_from folder's weights in a SymBertForMaskedLM (a head the folder lacks is initialised as new)."""
    try:
        return SymBertForMaskedLM.from_pretrained(path, config=config)
    except (OSError, ValueError, RuntimeError) as error:
        raise UserError(f"Cannot load --init_from {path!r}: {' '.join(str(error).split())}") from error


def load_teacher(path: str, student: SymBertConfig) -> PreTrainedModel:
    """The teacher (BERT or SymBERT, with its MLM head where it has one), in eval mode without gradients; one line
    naming each field that differs from the student's."""
    if missing := missing_local_path(path):
        raise missing
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
    except (OSError, ValueError) as error:
        raise UserError(f"--teacher {path!r} is not a model folder with a readable config.json ({error}).") from error
    if not isinstance(config, (BertConfig, SymBertConfig)):
        raise UserError(f"--teacher {path!r} is a {config.model_type!r} model; a BERT or SymBERT one is needed.")
    differing = [
        f"{name} {getattr(config, name)} (the student's {getattr(student, name)})"
        for name in MATCHED_FIELDS
        if getattr(config, name) != getattr(student, name)
    ]
    if differing:
        raise UserError(f"--teacher {path!r} does not match the model trained: its {', '.join(differing)}.")
    has_head = any(name.endswith(("ForMaskedLM", "ForPreTraining")) for name in config.architectures or [])
    if isinstance(config, SymBertConfig):
        model_class = SymBertForMaskedLM if has_head else SymBertModel
    else:
        model_class = BertForMaskedLM if has_head else BertModel
    try:
        teacher = model_class.from_pretrained(path)
    except (OSError, ValueError, RuntimeError) as error:
        raise UserError(f"Cannot load --teacher {path!r}: {' '.join(str(error).split())}") from error
    teacher.requires_grad_(False)
    return teacher.eval()


def source_name(path: str) -> str:
    """A Hub id as given; a local folder by its name only: the record may be published, a home layout must not be."""
    return Path(path).name if Path(path).exists() else path


def carried_files(init_from: str | None) -> dict[str, Path]:
    """{name: file} that the final model keeps of its --init_from folder besides the weights: its conversion record
    and its sentence-transformers configuration (it loads there as the model it was made from does)."""
    if init_from is None:
        return {}
    files = sentence_transformers_files(init_from)
    if (Path(init_from) / CONVERSION_FILE).is_file():
        files[CONVERSION_FILE] = Path(init_from) / CONVERSION_FILE
    return files


def made_from_record(init_from: str | None, teacher_path: str | None, teacher: PreTrainedModel | None) -> dict | None:
    """training_summary.json's "made_from": the --init_from model (and symbert-convert's record of it) and the
    --teacher distilled toward (its name, licence and kind), as the release's card names them; None for a model
    trained from scratch."""
    if init_from is None and teacher_path is None:
        return None
    conversion = None
    if init_from is not None and (Path(init_from) / CONVERSION_FILE).is_file():
        try:
            conversion = json.loads((Path(init_from) / CONVERSION_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise UserError(f"{Path(init_from) / CONVERSION_FILE} is not readable JSON ({error}).") from None
    record = {
        "init_from": None if init_from is None else source_name(init_from),
        "conversion": conversion,
        "teacher": None,
    }
    if teacher is not None:
        record["teacher"] = {
            "name": source_name(teacher_path),
            "license": model_card_license(teacher_path),
            "architecture": type(teacher).__name__,
            "mlm_head": hasattr(teacher, "cls"),
        }
    return record


@dataclass
class DistillationLoss:
    """loss = mean over layers of ‖h_student − h_teacher‖² / ‖h_teacher‖² over the real tokens (every layer's output,
    the embeddings left out), + KL(teacher ‖ student) of the MLM distributions at the masked positions when the teacher
    has an MLM head. The student runs through its wrapper's forward (DDP syncs gradients there) with the labels, so its
    MLM head runs as in pre-training (sparse or full); without a teacher head the student's MLM loss enters with weight
    0, which keeps every parameter in the graph (DDP) and leaves the encoder to the teacher."""

    teacher: PreTrainedModel

    def __call__(self, model: torch.nn.Module, inputs: dict) -> torch.Tensor:
        inputs = dict(inputs)
        labels = inputs.pop("labels")
        num_items_in_batch = inputs.pop("num_items_in_batch", None)
        outputs = model(**inputs, labels=labels, output_hidden_states=True, num_items_in_batch=num_items_in_batch)
        with torch.no_grad():
            teacher_encoder = getattr(self.teacher, "bert", self.teacher)
            expected = teacher_encoder(**inputs, output_hidden_states=True, return_dict=True)
        mask = inputs.get("attention_mask")
        mask = torch.ones_like(inputs["input_ids"]) if mask is None else mask
        mask = mask.unsqueeze(-1).to(outputs.hidden_states[-1].dtype)
        layer_errors = [
            ((mine - theirs).pow(2) * mask).sum() / (theirs.pow(2) * mask).sum().clamp_min(1e-12)
            for mine, theirs in zip(outputs.hidden_states[1:], expected.hidden_states[1:])
        ]
        loss = torch.stack(layer_errors).mean()
        if not hasattr(self.teacher, "cls"):
            return loss + 0.0 * outputs.loss
        config = unwrapped(model).config
        if config.sparse_prediction:  # the student's logits are rows of its labelled positions, in this order
            teacher_hidden, kept = _labelled_positions(
                expected.last_hidden_state, labels, config.max_predictions_per_seq
            )
            student_logits = outputs.logits.reshape(-1, outputs.logits.shape[-1])
        else:
            teacher_hidden, kept = expected.last_hidden_state.reshape(-1, config.hidden_size), labels.reshape(-1)
            student_logits = outputs.logits.reshape(-1, outputs.logits.shape[-1])
        scored = kept != -100
        if not scored.any():
            return loss + 0.0 * outputs.loss
        with torch.no_grad():
            teacher_logits = self.teacher.cls(teacher_hidden[scored]).float()
        divergence = torch.nn.functional.kl_div(
            student_logits[scored].float().log_softmax(-1),
            teacher_logits.log_softmax(-1),
            log_target=True,
            reduction="batchmean",
        )
        return loss + divergence


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The SymBertForMaskedLM inside DDP's (`module`) or torch.compile's (`_orig_mod`) wrapper."""
    while hasattr(model, "module") or hasattr(model, "_orig_mod"):
        model = getattr(model, "module", None) or model._orig_mod
    return model
