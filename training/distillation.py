"""Distillation toward a teacher (`symbert-pretrain --teacher PATH`): a SymBERT model, typically converted from the
teacher by symbert-convert (`--init_from`), trained to reproduce the teacher's hidden states (and its masked-LM
logits when the teacher has an MLM head) on the run's masked blocks, with everything pre-training has (recipes,
streamed and prepared data, workers, exact resume, DDP). The teacher runs without gradients inside the training step,
so its time is in the run's tokens/s."""

import contextlib
import functools
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, BertConfig, BertForMaskedLM, BertModel, PreTrainedModel
from transformers.utils import logging as transformers_logging

from .. import SymBertConfig, SymBertForMaskedLM, SymBertModel
from ..attention_symbert import ATTENTION_MARKER
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
    level = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # the report of the heads that differ: said below in one line
    try:
        model, info = SymBertForMaskedLM.from_pretrained(path, config=config, output_loading_info=True)
    except (OSError, ValueError, RuntimeError) as error:
        raise UserError(f"Cannot load --init_from {path!r}: {' '.join(str(error).split())}") from error
    finally:
        transformers_logging.set_verbosity(level)
    expected = ("cls.", "pooler.", "bert.pooler.", "classifier.")
    unexplained = [name for name in [*info["missing_keys"], *info["unexpected_keys"]] if not name.startswith(expected)]
    if unexplained:
        raise UserError(f"--init_from {path!r} does not hold this model's weights: {', '.join(sorted(unexplained))}.")
    if any(name.startswith("cls.") for name in info["missing_keys"]):
        print(f"--init_from {path}: the folder has no MLM head; the run's is new (trained only toward a teacher's).")
    return model


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
    has_head = teacher_has_mlm_head(path)
    if isinstance(config, SymBertConfig):
        model_class = SymBertForMaskedLM if has_head else SymBertModel
    else:
        model_class = BertForMaskedLM if has_head else BertModel
    level = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # a head the teacher has and a pooler it lacks are not used here
    try:
        teacher, info = model_class.from_pretrained(path, output_loading_info=True)
    except (OSError, ValueError, RuntimeError) as error:
        raise UserError(f"Cannot load --teacher {path!r}: {' '.join(str(error).split())}") from error
    finally:
        transformers_logging.set_verbosity(level)
    missing = [name for name in info["missing_keys"] if "pooler." not in name]
    if missing:
        shown = ", ".join(sorted(missing)[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise UserError(f"--teacher {path!r} lacks weights its model needs: {shown}.")
    teacher.requires_grad_(False)
    return teacher.eval()


def teacher_has_mlm_head(path: str) -> bool:
    """Whether the teacher's config names a masked-LM architecture (distillation then trains the student's head)."""
    architectures = AutoConfig.from_pretrained(path, trust_remote_code=False).architectures or []
    return any(name.endswith(("ForMaskedLM", "ForPreTraining")) for name in architectures)


def trainable_only_attention(model: torch.nn.Module) -> None:
    """Stage 1: every parameter frozen but the self-attention modules' (the optimizer gets only those)."""
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(ATTENTION_MARKER in f".{name}")


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


DISTILLATION_STAGES = ("attention", "model")


@dataclass
class DistillationLoss:
    """The distance to the teacher that a distillation step minimises, for one of its two stages:

    - "attention" (stage 1, only the self-attention parameters trainable): each layer's self-attention module is
      given the input the teacher's layer l sees, and the loss is the mean over layers of ‖attn_s(x_l) − attn_t(x_l)‖²
      / ‖attn_t(x_l)‖² over the real tokens. The layers are independent problems; the rest of the student runs only
      so that DDP sees its usual forward.
    - "model" (stage 2, end to end): the mean over layers of ‖h_student − h_teacher‖² / ‖h_teacher‖² over the real
      tokens (every layer's output, the embeddings left out), + `pooled_weight` × (1 − cosine) of the mean-pooled last
      hidden states (the sentence embedding a sentence-transformers teacher serves), + KL(teacher ‖ student) of the MLM
      distributions at the masked positions when the teacher has an MLM head.

    Both read the blocks unmasked (each masked position's original token put back) except where the MLM divergence
    is measured (the model stage of a teacher with an MLM head): a sentence encoder is used on text, not on [MASK]s.
    The student runs through its wrapper's forward (DDP syncs gradients there) with the labels, so its MLM head runs as
    in pre-training (sparse or full); without a teacher head the student's MLM loss enters with weight 0, which keeps
    every parameter in the graph (DDP) and leaves the encoder to the teacher."""

    teacher: PreTrainedModel
    stage: str = "model"
    pooled_weight: float = 1.0

    def __call__(self, model: torch.nn.Module, inputs: dict) -> torch.Tensor:
        inputs = dict(inputs)
        labels = inputs.pop("labels")
        num_items_in_batch = inputs.pop("num_items_in_batch", None)
        mask = inputs.get("attention_mask")
        mask = torch.ones_like(inputs["input_ids"]) if mask is None else mask
        if self.stage == "attention" or not hasattr(self.teacher, "cls"):
            # nothing is predicted at the masked positions: both models read the text itself, as they are used
            inputs["input_ids"] = torch.where(labels != -100, labels, inputs["input_ids"])
        if self.stage == "attention":
            return self.attention_loss(model, inputs, labels, num_items_in_batch, mask)
        outputs = model(**inputs, labels=labels, output_hidden_states=True, num_items_in_batch=num_items_in_batch)
        with torch.no_grad():
            expected = teacher_encoder(self.teacher)(**inputs, output_hidden_states=True, return_dict=True)
        weights = mask.unsqueeze(-1).to(outputs.hidden_states[-1].dtype)
        loss = torch.stack(
            [
                normalised_error(mine, theirs, weights)
                for mine, theirs in zip(outputs.hidden_states[1:], expected.hidden_states[1:])
            ]
        ).mean()
        if self.pooled_weight:
            mine, theirs = (
                mean_pooled(outputs.hidden_states[-1], weights),
                mean_pooled(expected.last_hidden_state, weights),
            )
            loss = loss + self.pooled_weight * (1 - torch.nn.functional.cosine_similarity(mine, theirs, dim=-1)).mean()
        if not hasattr(self.teacher, "cls"):
            return loss + 0.0 * outputs.loss
        return loss + self.mlm_divergence(model, outputs, expected, labels)

    def attention_loss(self, model, inputs, labels, num_items_in_batch, mask):
        """Stage 1: every layer's self-attention against the teacher's, both given the teacher's layer input."""
        teacher_modules = [layer.attention.self for layer in teacher_encoder(self.teacher).encoder.layer]
        student_modules = [layer.attention.self for layer in teacher_encoder(unwrapped(model)).encoder.layer]
        layer_inputs, expected, produced = {}, {}, {}
        with hooked(teacher_modules, layer_inputs, expected), torch.no_grad():
            teacher_encoder(self.teacher)(**inputs)
        with hooked(student_modules, None, produced, replace_inputs=layer_inputs):
            outputs = model(**inputs, labels=labels, num_items_in_batch=num_items_in_batch)
        weights = mask.unsqueeze(-1).to(produced[0].dtype)
        errors = [normalised_error(produced[i], expected[i], weights) for i in range(len(student_modules))]
        return torch.stack(errors).mean() + 0.0 * outputs.loss

    def mlm_divergence(self, model, outputs, expected, labels):
        config = unwrapped(model).config
        if config.sparse_prediction:  # the student's logits are rows of its labelled positions, in this order
            teacher_hidden, kept = _labelled_positions(
                expected.last_hidden_state, labels, config.max_predictions_per_seq
            )
        else:
            teacher_hidden, kept = expected.last_hidden_state.reshape(-1, config.hidden_size), labels.reshape(-1)
        student_logits = outputs.logits.reshape(-1, outputs.logits.shape[-1])
        scored = kept != -100
        if not scored.any():
            return 0.0 * outputs.loss
        with torch.no_grad():
            teacher_logits = self.teacher.cls(teacher_hidden[scored]).float()
        return torch.nn.functional.kl_div(
            student_logits[scored].float().log_softmax(-1),
            teacher_logits.log_softmax(-1),
            log_target=True,
            reduction="batchmean",
        )


def normalised_error(mine: torch.Tensor, theirs: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """‖mine − theirs‖² / ‖theirs‖² over the positions `weights` [batch, seq, 1] marks (1 real token, 0 padding)."""
    return ((mine - theirs).pow(2) * weights).sum() / (theirs.pow(2) * weights).sum().clamp_min(1e-12)


def mean_pooled(hidden: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The mean of each sequence's real tokens' states [batch, hidden]: sentence-transformers' mean pooling."""
    return (hidden * weights).sum(1) / weights.sum(1).clamp_min(1)


def teacher_encoder(model: torch.nn.Module) -> torch.nn.Module:
    """The encoder (BertModel or SymBertModel) of a model with or without a head."""
    return getattr(model, "bert", model)


@contextlib.contextmanager
def hooked(modules, inputs: dict | None, outputs: dict, replace_inputs: dict | None = None):
    """While open, module i's first input (its hidden states) is recorded in inputs[i] or replaced by
    replace_inputs[i], and its first output recorded in outputs[i]."""

    def before(index, module, args, kwargs):
        if replace_inputs is not None:
            if args:
                return (replace_inputs[index], *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": replace_inputs[index]}
        inputs[index] = args[0] if args else kwargs["hidden_states"]
        return None

    def after(index, module, args, output):
        outputs[index] = output[0] if isinstance(output, tuple) else output

    handles = []
    try:
        for index, module in enumerate(modules):
            handles.append(module.register_forward_pre_hook(functools.partial(before, index), with_kwargs=True))
            handles.append(module.register_forward_hook(functools.partial(after, index)))
        yield
    finally:
        for handle in handles:
            handle.remove()


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The SymBertForMaskedLM inside DDP's (`module`) or torch.compile's (`_orig_mod`) wrapper."""
    while hasattr(model, "module") or hasattr(model, "_orig_mod"):
        model = getattr(model, "module", None) or model._orig_mod
    return model
