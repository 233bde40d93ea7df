"""Distillation toward a teacher (`symbert-pretrain --teacher PATH`): a SymBERT model, typically converted from the
teacher by symbert-convert (`--init_from`), trained to reproduce the teacher's hidden states (and its masked-LM
logits when the teacher has an MLM head) on the run's masked blocks, with everything pre-training has (recipes,
streamed and prepared data, workers, exact resume, DDP). The teacher runs without gradients inside the training step,
so its time is in the run's tokens/s."""

import contextlib
import functools
import hashlib
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
from huggingface_hub.utils.sha import sha_fileobj
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    BertModel,
    PreTrainedModel,
)
from transformers.utils import logging as transformers_logging

from .. import SymBertConfig, SymBertForMaskedLM, SymBertForSequenceClassification, SymBertModel
from ..attention_symbert import ATTENTION_MARKER, SymBertSelfAttention
from ..cli import UserError
from ..files import model_card_license, sentence_transformers_files
from ..modeling_symbert import _labelled_positions
from ..tools import check_model_folder, checked_config
from ..tools.conversion_record import ConversionRecord
from .arguments import ModelArguments, config_overrides, model_config
from .data.tokenizer import tokenizer_fingerprint
from .made_from import MadeFromRecord, Teacher

# the distillation losses' weights as the command line defaults them (a resume with others is another run)
LOSS_WEIGHT_DEFAULTS = {
    field.name: field.default for field in fields(ModelArguments) if field.name.endswith("_loss_weight")
}

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
    needed = ", not a SymBERT one; convert a BERT first (symbert-convert BERT OUTPUT --attention_type T)"
    config = checked_config(path, "--init_from", (SymBertConfig,), needed)
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
        model = model.float()  # trained in float32 (--bf16 and --fp16 autocast), whatever dtype the folder stores
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


def load_teacher(path: str, student: SymBertConfig, block_length: int | None = None) -> PreTrainedModel:
    """The teacher (BERT or SymBERT, with its MLM head or its sequence classifier where it has one), in eval mode
    without gradients; one line naming each field that differs from the student's, or its positions when fewer than
    `block_length`."""
    config = checked_config(path, "--teacher", (BertConfig, SymBertConfig), "; a BERT or SymBERT one is needed")
    differing = [
        f"{name} {getattr(config, name)} (the student's {getattr(student, name)})"
        for name in MATCHED_FIELDS
        if getattr(config, name) != getattr(student, name)
    ]
    if differing:
        raise UserError(f"--teacher {path!r} does not match the model trained: its {', '.join(differing)}.")
    if block_length is not None and config.max_position_embeddings < block_length:
        raise UserError(
            f"--teacher {path!r} reads at most {config.max_position_embeddings} tokens (its max_position_embeddings), "
            f"fewer than the blocks' max_seq_length {block_length}; use --max_seq_length "
            f"{config.max_position_embeddings} or less."
        )
    check_model_folder(path, "--teacher")  # readable, finite weights of its config's sizes; a readable card
    head = teacher_head(config)
    symbert = isinstance(config, SymBertConfig)
    model_class = {
        "mlm": SymBertForMaskedLM if symbert else BertForMaskedLM,
        "classifier": SymBertForSequenceClassification if symbert else BertForSequenceClassification,
        None: SymBertModel if symbert else BertModel,
    }[head]
    level = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # a head the teacher has and a pooler it lacks are not used here
    try:
        teacher, info = model_class.from_pretrained(path, output_loading_info=True)
        teacher = teacher.float()  # run as the student is: a float16 teacher on a CPU is slow and mixes dtypes
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


def teacher_fingerprint(path: str | None, stage: str, loss_weights: dict | None = None) -> dict | None:
    """What identifies the teacher a run distils toward, saved in every checkpoint so that a resume toward another
    (another folder, its weights changed, another tokenizer, no --teacher), in another stage or with other loss
    weights is refused: its name, the sha256 of its weight files, its tokenizer's fingerprint (a Hub id: named only)
    and the `loss_weights` (name -> weight) that differ from their defaults, under "losses" only where one does (the
    checkpoints of earlier versions, which saved none, resume with the defaults). None without a teacher."""
    if path is None:
        return None
    changed = {name: weight for name, weight in (loss_weights or {}).items() if weight != LOSS_WEIGHT_DEFAULTS[name]}
    fingerprint = teacher_identity(Path(path), stage)
    return {**fingerprint, "losses": changed} if changed else fingerprint


def teacher_identity(folder: Path, stage: str) -> dict:
    if not folder.is_dir():
        return {"name": str(folder), "weights": None, "tokenizer": None, "stage": stage}
    digest = hashlib.sha256()
    for file in sorted([*folder.glob("*.safetensors"), *folder.glob("*.bin")]):
        with open(file, "rb") as handle:
            digest.update(file.name.encode() + sha_fileobj(handle))
    try:
        tokenizer = tokenizer_fingerprint(AutoTokenizer.from_pretrained(folder, trust_remote_code=False))
    except (OSError, ValueError):
        tokenizer = None
    return {"name": folder.name, "weights": digest.hexdigest()[:16], "tokenizer": tokenizer, "stage": stage}


def check_teacher_tokenizer(path: str, tokenizer) -> None:
    """One line when the teacher's tokenizer gives other ids than the run's: the same vocab_size is not the same
    vocabulary (the student would be taught the teacher's words under other ids)."""
    try:
        teacher_tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    except (OSError, ValueError):
        return  # a teacher folder without tokenizer files: its vocab_size is all there is to compare
    theirs, mine = teacher_tokenizer.get_vocab(), tokenizer.get_vocab()
    # transformers 5 makes a tokenizer of the special tokens only for a folder without tokenizer files
    if len(theirs) <= len(set(teacher_tokenizer.all_special_tokens)) or theirs == mine:
        return
    differing = sorted(set(theirs.items()) ^ set(mine.items()), key=lambda item: item[1])[:1]
    token, index = differing[0]
    raise UserError(
        f"--teacher {path!r} reads text with another vocabulary than this run's tokenizer (e.g. id {index} is "
        f"{token!r} in one of them only); distil with the teacher's own tokenizer."
    )


def teacher_head(config) -> str | None:
    """The head the teacher's config names: "mlm" (a masked-LM architecture: distillation trains the student's
    head on it), "classifier" (a sequence classifier: the student's encoder is trained through it) or None."""
    architectures = config.architectures or []
    if any(name.endswith(("ForMaskedLM", "ForPreTraining")) for name in architectures):
        return "mlm"
    if any(name.endswith("ForSequenceClassification") for name in architectures):
        return "classifier"
    return None


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
    if (Path(init_from) / ConversionRecord.FILE_NAME).is_file():
        files[ConversionRecord.FILE_NAME] = Path(init_from) / ConversionRecord.FILE_NAME
    return files


def made_from_record(
    init_from: str | None, teacher_path: str | None, teacher: PreTrainedModel | None
) -> MadeFromRecord | None:
    """training_summary.json's "made_from": the --init_from model (and symbert-convert's record of it) and the
    --teacher distilled toward (its name, licence and kind), as the release's card names them; None for a model
    trained from scratch."""
    if init_from is None and teacher_path is None:
        return None
    return MadeFromRecord(
        init_from=None if init_from is None else source_name(init_from),
        conversion=None if init_from is None else ConversionRecord.read(init_from),
        teacher=None
        if teacher is None
        else Teacher(
            name=source_name(teacher_path),
            license=model_card_license(teacher_path),
            architecture=type(teacher).__name__,
            mlm_head=hasattr(teacher, "cls"),
        ),
    )


@dataclass
class RunStart:
    """What a run starts from, made once by `run_start` before its data is read: the config, the --init_from folder
    (None: a new model) and the --teacher distilled toward (None: none), loaded and checked against the config. The
    rest of the run asks it, not the arguments, what it starts from."""

    config: SymBertConfig
    init_from: str | None = None
    teacher_path: str | None = None
    teacher: PreTrainedModel | None = None
    distill_stage: str = "model"
    loss_weights: dict[str, float] = field(default_factory=dict)  # the --*_loss_weight arguments, by name

    def model(self) -> SymBertForMaskedLM:
        """The model trained: new, or the --init_from folder's. Built where the run builds it, after the data: the
        weights' initialisation draws from the seed after it."""
        return SymBertForMaskedLM(self.config) if self.init_from is None else initial_model(self.init_from, self.config)

    @property
    def trains_only_attention(self) -> bool:
        """The distillation's attention stage: every parameter but the self-attention modules' stays frozen."""
        return self.teacher is not None and self.distill_stage == "attention"

    def distillation(self, device: torch.device, tokenizer) -> "DistillationLoss | None":
        """The loss toward the teacher on `device`, or None for a run without one (the Trainer's MLM loss)."""
        if self.teacher is None:
            return None
        return DistillationLoss(
            self.teacher.to(device),
            self.distill_stage,
            self.loss_weights["pooled_loss_weight"],
            self.loss_weights["attention_map_loss_weight"],
            self.loss_weights["value_relation_loss_weight"],
            text_tokens=(tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id),
        )

    def teacher_fingerprint(self) -> dict | None:
        return teacher_fingerprint(self.teacher_path, self.distill_stage, self.loss_weights)

    def carried_files(self) -> dict[str, Path]:
        return carried_files(self.init_from)

    def made_from(self) -> MadeFromRecord | None:
        return made_from_record(self.init_from, self.teacher_path, self.teacher)

    def trains_mlm_head(self) -> bool:
        """Whether the MLM head learns what the masked tokens are: without a teacher, or from a teacher's MLM head
        in the model stage (otherwise its scores would mean nothing)."""
        return self.teacher is None or (self.distill_stage == "model" and hasattr(self.teacher, "cls"))


def run_start(model_args: ModelArguments, tokenizer, block_length: int) -> RunStart:
    """The config of the arguments (or of the --init_from folder, with the overrides it allows) and the --teacher,
    checked against the run's tokenizer and `block_length` before the data or any weights are read."""
    if model_args.init_from is None:
        config = model_config(model_args, tokenizer)
    else:
        config = initial_config(model_args.init_from, config_overrides(model_args))
        if len(tokenizer) > config.vocab_size:
            raise UserError(
                f"The tokenizer has {len(tokenizer)} tokens but --init_from {model_args.init_from!r} has "
                f"vocab_size {config.vocab_size}; use the model's own tokenizer (leave --tokenizer out)."
            )
    teacher = None
    if model_args.teacher is not None:
        check_teacher_tokenizer(model_args.teacher, tokenizer)
        teacher = load_teacher(model_args.teacher, config, block_length=block_length)
    return RunStart(
        config,
        model_args.init_from,
        model_args.teacher,
        teacher,
        model_args.distill_stage,
        {name: getattr(model_args, name) for name in LOSS_WEIGHT_DEFAULTS},
    )


@dataclass
class DistillationLoss:
    """The distance to the teacher that a distillation step minimises, for one of its two stages:

    - "attention" (stage 1, only the self-attention parameters trainable): each layer's self-attention module is
      given the input the teacher's layer l sees, and the loss is the mean over layers of ‖attn_s(x_l) − attn_t(x_l)‖²
      / ‖attn_t(x_l)‖² over the real tokens, + `attention_map_weight` × the KL divergence of the heads' attention
      distributions. The layers are independent problems; the rest of the student runs only so that DDP sees its
      usual forward.
    - "model" (stage 2, end to end): the mean over layers of ‖h_student − h_teacher‖² / ‖h_teacher‖² over the real
      tokens (every layer's output, the embeddings left out), + `pooled_weight` × (1 − cosine) of the mean-pooled last
      hidden states (the sentence embedding a sentence-transformers teacher serves), + KL(teacher ‖ student) of the MLM
      distributions at the masked positions when the teacher has an MLM head, + the KL divergence of the task's
      distribution (the MSE of its score for a regression) when the teacher is a sequence classifier: the student's
      last hidden states go through the teacher's own pooler and classifier (frozen), which the final model keeps,
      on each text the blocks hold whole, run alone as the classifier is used (`text_tokens`).

    In both, `value_relation_weight` adds MiniLM's value-relation loss (Wang et al. 2020): per layer and head, the KL
    divergence of softmax(V·Vᵀ/√d) over the real tokens, each model's values computed from its own attention's input
    (the teacher's in stage 1): what the attention output alone leaves free in a changed value path (shared, MHE).

    Both read the blocks unmasked (each masked position's original token put back) except where the MLM divergence
    is measured (the model stage of a teacher with an MLM head): a sentence encoder is used on text, not on [MASK]s.
    The student runs through its wrapper's forward (DDP syncs gradients there) with the labels, so its MLM head runs as
    in pre-training (sparse or full); without a teacher head the student's MLM loss enters with weight 0, which keeps
    every parameter in the graph (DDP) and leaves the encoder to the teacher."""

    teacher: PreTrainedModel
    stage: str = "model"
    pooled_weight: float = 1.0
    attention_map_weight: float = 0.0
    value_relation_weight: float = 0.0
    # (cls, sep, pad) token ids: a classifier teacher is matched on the whole texts inside the blocks
    text_tokens: tuple[int, int, int] | None = None
    texts_per_step: int = 256

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
        texts = self.classified_texts(inputs["input_ids"])
        if texts is not None:  # both models read each text alone, as the classifier does, instead of the blocks
            inputs, mask, num_items_in_batch = texts, texts["attention_mask"], None
            labels = torch.full_like(texts["input_ids"], -100)
            labels[:, 0] = texts["input_ids"][:, 0]  # one position a text: the untrained MLM head stays in the graph
        student_modules, teacher_modules = self_attention_modules(model), self_attention_modules(self.teacher)
        student_inputs, teacher_inputs = {}, {}
        relations = self.value_relation_weight > 0
        with hooked(student_modules if relations else [], student_inputs, {}):
            outputs = model(**inputs, labels=labels, output_hidden_states=True, num_items_in_batch=num_items_in_batch)
        with hooked(teacher_modules if relations else [], teacher_inputs, {}), torch.no_grad():
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
        if relations:
            loss = loss + self.value_relation_weight * self.value_relations(
                student_modules, student_inputs, teacher_modules, teacher_inputs, mask
            )
        if hasattr(self.teacher, "classifier"):
            loss = loss + self.classifier_divergence(outputs.hidden_states[-1], expected)
        if not hasattr(self.teacher, "cls"):
            return loss + 0.0 * outputs.loss
        return loss + self.mlm_divergence(model, outputs, expected, labels)

    def attention_loss(self, model, inputs, labels, num_items_in_batch, mask):
        """Stage 1: every layer's self-attention against the teacher's, both given the teacher's layer input."""
        teacher_modules, student_modules = self_attention_modules(self.teacher), self_attention_modules(model)
        layer_inputs, expected, produced = {}, {}, {}
        with hooked(teacher_modules, layer_inputs, expected), torch.no_grad():
            teacher_encoder(self.teacher)(**inputs)
        with hooked(student_modules, None, produced, replace_inputs=layer_inputs):
            outputs = model(**inputs, labels=labels, num_items_in_batch=num_items_in_batch)
        weights = mask.unsqueeze(-1).to(produced[0].dtype)
        errors = [normalised_error(produced[i], expected[i], weights) for i in range(len(student_modules))]
        loss = torch.stack(errors).mean() + 0.0 * outputs.loss
        if self.attention_map_weight:
            maps = []
            for mine, theirs, hidden in zip(student_modules, teacher_modules, layer_inputs.values()):
                (my_query, my_key, _), (their_query, their_key, _) = (
                    head_projections(mine, hidden),
                    head_projections(theirs, hidden),
                )
                with torch.no_grad():
                    their_scores = their_query @ their_key.transpose(-1, -2)
                maps.append(relation_divergence(my_query @ my_key.transpose(-1, -2), their_scores, mask))
            loss = loss + self.attention_map_weight * torch.stack(maps).mean()
        if self.value_relation_weight:
            loss = loss + self.value_relation_weight * self.value_relations(
                student_modules, layer_inputs, teacher_modules, layer_inputs, mask
            )
        return loss

    def value_relations(self, student_modules, student_inputs, teacher_modules, teacher_inputs, mask):
        """The mean over layers of the value-relation divergence, each module's values from its recorded input."""
        divergences = []
        for index, (mine, theirs) in enumerate(zip(student_modules, teacher_modules)):
            my_values = head_projections(mine, student_inputs[index])[2]
            with torch.no_grad():
                their_values = head_projections(theirs, teacher_inputs[index])[2]
            divergences.append(relation_divergence(self_relation(my_values), self_relation(their_values), mask))
        return torch.stack(divergences).mean()

    def classified_texts(self, input_ids: torch.Tensor) -> dict | None:
        """A classifier teacher's texts in the model stage: each [CLS] ... [SEP] the blocks hold whole (at most
        `texts_per_step`), as a padded batch; None for another teacher, or blocks without a whole text (texts longer
        than a block: the blocks are read, and the head at each block's first position)."""
        if self.stage != "model" or not hasattr(self.teacher, "classifier") or self.text_tokens is None:
            return None
        return whole_texts(input_ids, *self.text_tokens, self.texts_per_step)

    def classifier_divergence(self, hidden: torch.Tensor, expected) -> torch.Tensor:
        """The teacher's task head (its pooler and classifier) read on the student's last hidden states against its
        own output on the same input: KL(teacher ‖ student) of the label distributions, or the squared error of a
        regression's score."""
        head = self.teacher.classifier
        mine = head(teacher_encoder(self.teacher).pooler(hidden)).float()
        with torch.no_grad():
            theirs = head(expected.pooler_output).float()
        if self.teacher.config.problem_type == "regression" or self.teacher.config.num_labels == 1:
            return torch.nn.functional.mse_loss(mine, theirs)
        return torch.nn.functional.kl_div(
            mine.log_softmax(-1), theirs.log_softmax(-1), log_target=True, reduction="batchmean"
        )

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


def whole_texts(input_ids: torch.Tensor, cls: int, sep: int, pad: int, most: int) -> dict | None:
    """The texts ([CLS] ... [SEP], as the data path tokenises each) that blocks [batch, seq] hold whole, in block
    order, at most `most`, as a padded batch (input_ids, attention_mask, token_type_ids); None if there is none."""
    texts = []
    for row in input_ids:
        ends = (row == sep).nonzero().flatten().tolist()
        for start in (row == cls).nonzero().flatten().tolist():
            end = next((end for end in ends if end > start), None)
            if end is not None and len(texts) < most:
                texts.append(row[start : end + 1])
    if not texts:
        return None
    ids = torch.nn.utils.rnn.pad_sequence(texts, batch_first=True, padding_value=pad)
    mask = torch.nn.utils.rnn.pad_sequence([torch.ones_like(t) for t in texts], batch_first=True)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def relation_divergence(mine: torch.Tensor, theirs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL(theirs ‖ mine) of the row softmaxes over the real keys of two score tensors [batch, heads, seq, seq],
    averaged over the heads and the real query tokens; `mask` [batch, seq] marks the real tokens (1) and padding (0)."""
    keys = mask[:, None, None, :].bool()
    mine = mine.float().masked_fill(~keys, -1e4).log_softmax(-1)  # -1e4: a zero weight, finite in every dtype
    theirs = theirs.float().masked_fill(~keys, -1e4).log_softmax(-1)
    divergence = (theirs.exp() * (theirs - mine)).masked_fill(~keys, 0.0).sum(-1)  # [batch, heads, queries]
    queries = mask[:, None, :].to(divergence.dtype)
    return (divergence * queries).sum() / (queries.sum() * divergence.shape[1]).clamp_min(1)


def self_relation(values: torch.Tensor) -> torch.Tensor:
    """MiniLM's value relation before its softmax: V·Vᵀ/√d per head [batch, heads, seq, seq]."""
    return values @ values.transpose(-1, -2) / values.shape[-1] ** 0.5


def head_projections(module: torch.nn.Module, hidden_states: torch.Tensor):
    """(query, key, value) per head [batch, heads, seq, head_size] of a self-attention module, BERT's or a SymBERT
    type's, as its scores and its output use them: query·keyᵀ is the score (the module's scaling in the query), a
    key/value head shared by a group of query heads is repeated for each, and the values carry what the type does
    per channel after attention (finish_output), which commutes with attention's weighted mean."""
    if isinstance(module, SymBertSelfAttention):
        query, key, value = module.project(hidden_states)
        key, value = (tensor.repeat_interleave(module.num_key_value_groups, dim=1) for tensor in (key, value))
        value = module.split_heads(module.finish_output(value.transpose(1, 2).flatten(2)))
        return query * module.scaling, key, value
    size = module.attention_head_size

    def split(x):
        return x.view(*x.shape[:-1], -1, size).transpose(1, 2)

    query, key, value = module.query(hidden_states), module.key(hidden_states), module.value(hidden_states)
    return split(query) * size**-0.5, split(key), split(value)


def self_attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Each layer's self-attention module (`attention.self`) of a model with or without a head, wrapped or not."""
    return [layer.attention.self for layer in teacher_encoder(unwrapped(model)).encoder.layer]


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
