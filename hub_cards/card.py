"""The model card of a released SymBERT model.

The `bert` branch's card (`bert_card_template.md`) is rendered the same way: the model of `main` exported as plain
BERT, with the same sentences on its cost and on fine-tuning it as main's "Use it as plain BERT" section.

The GLUE results are written twice, as `.eval_results/glue.yaml` and as the card's `model-index` (eval_results.py).
The Markdown body is `card_template.md`, a Jinja template rendered by `ModelCard.from_template`.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from importlib.metadata import PackageNotFoundError, requires
from pathlib import Path
from typing import Any

import jinja2
import torch
import transformers
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from huggingface_hub.utils import validate_repo_id
from packaging.requirements import Requirement

from .. import ATTENTION_TYPES, BERT_ATTENTION_TYPE, SymBertConfig, SymBertForMaskedLM, attention_class
from ..tools.bert_export import BOUND, CHECK_BATCH
from ..tools.conversion_record import ConversionRecord
from ..training.glue.data import TASKS, benchmark_name, glue_mean_tasks, hub_datasets, reported_scores, score_names
from ..training.glue.results import GlueResults, paper_protocol
from ..training.glue.scoring import NOISE_STANDARD_ERRORS
from ..training.made_from import MadeFromRecord, Teacher

# The Hub's formats of the GLUE results (eval_results.py), re-exported: validation.py and the tests read them here
from .eval_results import EVAL_RESULTS_FILE as EVAL_RESULTS_FILE
from .eval_results import EvalResultEntry as EvalResultEntry
from .eval_results import glue_eval_entries as glue_eval_entries
from .eval_results import glue_eval_results as glue_eval_results
from .eval_results import read_eval_results as read_eval_results
from .eval_results import scored_on_hub
from .eval_results import task_id as task_id
from .hub_compat import parse_eval_result_entries as parse_eval_result_entries

TEMPLATE = Path(__file__).with_name("card_template.md")
BERT_TEMPLATE = Path(__file__).with_name("bert_card_template.md")
BERT_NOTES_TEMPLATE = Path(__file__).with_name("bert_export_notes.md")  # read by both cards
NUMBER_WORDS = "zero one two three four five six seven eight nine ten eleven twelve".split()


def in_words(count: int) -> str:
    """A count as the card writes it: "nine", or digits past twelve."""
    return NUMBER_WORDS[count] if count < len(NUMBER_WORDS) else str(count)


def mean_score_text() -> str:
    """How a seed's mean score is made, for the card: "the plain mean of the nine numbers (MNLI counts twice: matched
    and mismatched)", from the task table."""
    times = {2: "twice"}
    repeated = [
        f"{name.upper()} counts {times.get(len(spec.scores), f'{in_words(len(spec.scores))} times')}: "
        + " and ".join(split.removeprefix("validation_") for split in spec.eval_splits)
        for name, spec in TASKS.items()
        if spec.in_glue_mean and len(spec.scores) > 1
    ]
    notes = f" ({'; '.join(repeated)})" if repeated else ""
    return f"the plain mean of the {in_words(len(score_names(glue_mean_only=True)))} numbers{notes}"


def glue_data_text(results: GlueResults) -> str:
    """The data the GLUE scores were measured on, in words: the Hub dataset, linked, or the local data by name and by
    the sha256 of each task's files (glue_results.json "data_sha256"), saying they are not the Hub's."""
    if scored_on_hub(results):
        return ", ".join(f"[{name}](https://huggingface.co/datasets/{name})" for name in hub_datasets().split(", "))
    local_tasks = [TASKS[name] for name in results.task_aggregates if name in TASKS]
    if local_tasks and all(task.hub_dataset is None for task in local_tasks):  # data only a script of ours fetches
        hashes = results.data_sha256 or {}
        return "; ".join(
            f"{task.benchmark}: {task.source} (sha256 `{str(hashes.get(name, ''))[:12]}`)"
            for name, task in TASKS.items()
            if task in local_tasks
        )
    data = results.data
    hashes = ", ".join(f"{task} `{sha[:12]}`" for task, sha in (results.data_sha256 or {}).items() if sha)
    named = f"local data `{shown(data)}`" if data else "data the results file does not record"
    hashed = f" (sha256 of each task's files: {hashes})" if hashes else ""
    return f"{named}{hashed}, not the Hub's {hub_datasets()}"


def card_data(
    model_name: str,
    attention_type: str,
    *,
    eval_results: list[EvalResult] | None = None,
    datasets: list[str] | None = None,
    extra_tags: Iterable[str] = (),
    custom_code: bool = True,
    made_from: "MadeFrom | None" = None,
) -> ModelCardData:
    """The card's metadata; `custom_code=False` for the plain BERT export, which holds no code. A model made from a
    pretrained BERT (`made_from`) takes its licence, names it as base_model and, where its MLM head was never
    trained, is no fill-mask model."""
    pipeline_tag, tags = "fill-mask", []
    if made_from is not None:
        tags = ["distillation"] if made_from.distilled else []
        if made_from.sentence_transformers:
            tags.append("sentence-transformers")
        if made_from.distilled and not made_from.mlm_head:
            pipeline_tag = "sentence-similarity" if made_from.sentence_transformers else "feature-extraction"
    return ModelCardData(
        language="en",
        # the project's licence for a model trained from scratch; a model made from a BERT carries its BERT's, and
        # where that BERT's card states none the metadata states none either: no licence can be granted for weights
        # whose owner granted none (apache-2.0 would claim one), and refusing would stop a release its uploader may
        # hold the rights for; the card's text says the teacher's card states no licence
        license=made_from.license if made_from is not None else "apache-2.0",
        library_name="transformers",
        pipeline_tag=pipeline_tag,
        base_model=made_from and made_from.base_model,
        tags=["symbert", attention_type, "bert", *(["custom_code"] if custom_code else []), *tags, *extra_tags],
        datasets=datasets or None,
        model_name=model_name if eval_results else None,
        eval_results=eval_results or None,
    )


def escaped(value: Any) -> str:
    """Free text from an input file or option (a data set's description, the hardware, a baseline's label, a
    teacher's name) as a card shows it: on one line (line breaks and tabs become spaces, so it can end no table row
    nor start a block), HTML's & < > as entities (no tag, such as <script> or <img onerror=...>, reaches the card) and
    Markdown's \\ ` [ ] | backslash-escaped (no code span, link or table cell): it reads as written."""
    text = " ".join(str(value).split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\`\[\]|])", r"\\\1", text)


def code(value: Any) -> str:
    """A name as a code span (`BertModel`), or escaped text where it could not be one (it holds a backtick, a table
    bar or a line break): a recorded name is shown as written either way."""
    text = str(value)
    return f"`{text}`" if re.fullmatch(r"[^`|\s<>]+( [^`|\s<>]+)*", text) else escaped(text)


def is_repo_id(name: str) -> bool:
    """Whether the Hub accepts `name` as a repository id (huggingface_hub's rules: letters, digits, - _ . only)."""
    try:
        validate_repo_id(name)
    except ValueError:
        return False
    return True


def is_hub_id(name: Any) -> bool:
    """Whether `name` (a recorded teacher's or BERT's) is a Hub model id, namespace/name, not a local folder's name."""
    return isinstance(name, str) and name.count("/") == 1 and not name.startswith((".", "/")) and is_repo_id(name)


def shown(value: Any) -> Any:
    """A protocol value for the card: lists joined, a local path by its name only."""
    if isinstance(value, list):
        return ",".join(map(str, value))
    return Path(value).name if isinstance(value, str) and Path(value).is_absolute() else value


def comparable(value: Any) -> Any:
    return sorted(value) if isinstance(value, list) else value  # the order seeds or tasks ran in is no deviation


def protocol_text(protocol: dict) -> str:
    """The fine-tuning protocol in words: the paper's, then every setting of this run that differs from it (a value
    equal to the paper's, or one the results file does not record, is not a deviation)."""
    paper = paper_protocol()
    text = (
        f"the paper's protocol: {paper['epochs']:g} epochs, learning rate {paper['learning_rate']:g} with a "
        f"{paper['lr_scheduler_type']} schedule and warm-up ratio {paper['warmup_ratio']:g}, batch "
        f"{paper['per_device_train_batch_size']}, max length {paper['max_length']}, weight decay {paper['weight_decay']:g}"
    )
    if protocol.get("precision"):  # the paper's protocol names none
        text += f"; trained in {protocol['precision']}"
    deviations = []
    for key, value in protocol.items():
        if key == "precision" or value is None or (key in paper and comparable(value) == comparable(paper[key])):
            continue
        paper_value = f" (paper: {shown(paper[key])})" if paper.get(key) is not None else ""
        deviations.append(f"`{key}={shown(value)}`{paper_value}")
    return text + (f"; this run differs in {', '.join(deviations)}" if deviations else "; no deviation from it")


def install_command() -> str:
    """`pip install` of what the model code needs (transformers, torch), with the project's version ranges."""
    try:
        ranges = {req.name: str(req.specifier) for req in map(Requirement, requires("symbert") or []) if not req.marker}
    except PackageNotFoundError:
        ranges = {}
    return "pip install " + " ".join(f'"{name}{ranges.get(name, "")}"' for name in ("transformers", "torch"))


def parameter_change(parameters: int, reference: int) -> str:
    """`parameters` against `reference` in words: "—" when equal, else the signed difference and percentage."""
    if parameters == reference:
        return "—"
    return f"{parameters - reference:+,} ({100 * (parameters - reference) / reference:+.1f}%)"


def parameter_counts(config: SymBertConfig) -> tuple[int, int]:
    """(this model's parameters, `original`'s with the same shape and vocabulary), counted on the meta device."""
    counts = []
    for attention_type in (config.attention_type, BERT_ATTENTION_TYPE):
        settings = {**config.to_dict(), "attention_type": attention_type}
        with torch.device("meta"):
            counts.append(SymBertForMaskedLM(SymBertConfig(**settings)).num_parameters())
    return tuple(counts)


def baseline_cells(task: dict) -> list[str]:
    """The baselines and verdict cells of a score's row (glue/scoring.py's `learning_verdict`; older results have none)."""
    baseline = task.get("baseline")
    if baseline is None:
        return ["not recorded", "not measured"]
    verdict = "**did not learn**" if baseline["did_not_learn"] else f"above (margin {baseline['margin']:.2f})"
    return [f"{baseline['majority']:.2f} / {baseline['chance']:.2f}", verdict]


def results_benchmark(results: GlueResults) -> str:
    """What the scores of `results` are published under: "GLUE", or the benchmarks of the tasks it has."""
    tasks = [name for name in TASKS if name in results.task_aggregates]
    if not tasks or any(TASKS[name].in_glue_mean for name in tasks):
        return benchmark_name()
    return " and ".join(dict.fromkeys(TASKS[name].benchmark for name in tasks))


def glue_table(results: GlueResults, baselines: list[tuple[str, GlueResults]] = ()) -> str:
    """Markdown: per-task mean ± sample std over the seeds, beside each --baselines model's (fine-tuned identically)
    and the task's baselines (majority class / chance) with the verdict against them, then the GLUE score."""
    tasks = results.task_aggregates
    glue_only = any(TASKS[name].in_glue_mean for name in tasks if name in TASKS)
    labels = [escaped(label) for label, _ in baselines]  # --baselines LABEL=FILE: free text in a table header
    rows = [
        "| task | metric | mean ± std (%) | seeds | "
        + "".join(f"{label} (%) | " for label in labels)
        + "majority / chance (%) | against the baselines |",
        "| --- | --- | ---: | ---: | " + "---: | " * len(labels) + "---: | --- |",
    ]

    def mean_and_std(task: dict | None) -> str:
        return "not scored" if task is None or task.get("mean") is None else f"{task['mean']:.2f} ± {task['std']:.2f}"

    for _, spec, score in reported_scores(glue_mean_only=glue_only):
        if score.name in tasks and tasks[score.name].get("mean") is not None:
            task = tasks[score.name]
            cells = [score.display, spec.metric.description, mean_and_std(task), str(task["n"])]
            cells += [mean_and_std(other.task_aggregates.get(score.name)) for _, other in baselines]
            rows.append(f"| {' | '.join([*cells, *baseline_cells(task)])} |")
    glue_score = results.glue
    if glue_score.get("complete") and glue_score.get("mean") is not None:
        others = [
            "" if not (g := other.glue).get("complete") else f"{g['mean']:.2f} ± {g['std']:.2f}"
            for _, other in baselines
        ]
        rows.append(
            f"| **{benchmark_name()}** | mean of the {len(score_names(glue_mean_only=True))} scores | **{glue_score['mean']:.2f} ± {glue_score['std']:.2f}** | "
            f"{glue_score['n_seeds']} | {''.join(f'{cell} | ' for cell in others)}| |"
        )
    return "\n".join(rows)


def did_not_learn(results: GlueResults) -> list[str]:
    """The display names of the GLUE-mean scores flagged "did not learn" (glue/scoring.py's `learning_verdict`)."""
    tasks = results.task_aggregates
    return [
        score.display
        for _, _, score in reported_scores(glue_mean_only=True)
        if tasks.get(score.name, {}).get("baseline", {}).get("did_not_learn")
    ]


def glue_baselines_text(results: GlueResults) -> str:
    """What the baselines columns mean and which scores show no learning."""
    text = (
        "Beside each score: the majority-class baseline (the best constant prediction on the same dev set: for "
        "accuracy the most frequent label) and chance (the expected score of uniformly random predictions; 0 for correlations). A score is flagged "
        f"**did not learn** when its mean is at most {NOISE_STANDARD_ERRORS} standard errors above the better "
        "baseline (the larger of the dev-set measurement's standard error and the seeds' std)."
    )
    flagged = did_not_learn(results)
    if flagged:
        text += (
            f" **{', '.join(flagged)}: did not learn** — within the baselines' noise, these numbers show no learning "
            "and are no evidence for the model or its attention variant."
        )
    return text


def glue_notices(repo_id: str, results: GlueResults) -> list[str]:
    """What the release says about its GLUE results: scores on local data, and scores that show no learning."""
    notices = []
    if not scored_on_hub(results):
        notices.append(
            f"{repo_id}: the {benchmark_name()} scores are on {glue_data_text(results).replace('`', '')}: the card says so; no "
            "model-index, no .eval_results file, no leaderboard entry."
        )
    tasks = results.task_aggregates
    for _, spec, score in reported_scores(glue_mean_only=True):
        baseline = tasks.get(score.name, {}).get("baseline")
        if baseline and baseline["did_not_learn"]:
            notices.append(
                f"{repo_id}: {spec.benchmark} {score.display} {tasks[score.name]['mean']:.2f} did not learn: within "
                f"{baseline['margin']:.2f} of its better baseline (majority {baseline['majority']:.2f}, chance "
                f"{baseline['chance']:.2f})."
            )
    return notices


def render(model_name: str, data: ModelCardData, template: Path = TEMPLATE, **template_values: Any) -> ModelCard:
    """The card: `data` (ModelCardData) as YAML, the body from `template` (card_template.md, or BERT_TEMPLATE for the
    `bert` branch)."""
    return ModelCard.from_template(data, template_path=str(template), model_name=model_name, **template_values)


def files_named(card_text: str) -> list[str]:
    """Relative link and image targets in the card's Markdown: files that must be in the repository."""
    targets = re.findall(r"(?<!\\)\]\(([^)\s]+)\)", card_text)  # an escaped "\]" (`escaped`) ends no link
    return sorted({t.split("#")[0] for t in targets if not re.match(r"[a-z]+://|#|mailto:", t)} - {""})


# ---------------------------------------------------------------------------------------------- card values

EMBEDDED_CORPUS_DESCRIPTION = (
    "the embedded corpus: nine public-domain English books (Project Gutenberg e-texts, https://www.gutenberg.org, 1811–1892), Jane Austen's "
    "Sense and Sensibility, Pride and Prejudice, Mansfield Park, Emma, Northanger Abbey and Persuasion, Lewis "
    "Carroll's Alice's Adventures in Wonderland, Mark Twain's The Adventures of Tom Sawyer and Arthur Conan Doyle's "
    "The Adventures of Sherlock Holmes, as the symbert package ships them (training/corpus/SOURCE.md there names "
    "the package each text was taken from)"
)


def dataset_text(data_arguments: dict) -> tuple[str, str | None]:
    """(description, Hub dataset id or None) of the pre-training data as symbert-pretrain recorded it (its
    DataArguments): a Hub data set, local files, or the embedded corpus."""
    if data_arguments.get("dataset_name"):
        config = f" ({data_arguments['dataset_config']})" if data_arguments.get("dataset_config") else ""
        name = data_arguments["dataset_name"]
        hub_id = name if isinstance(name, str) and is_repo_id(name) else None  # the metadata takes Hub ids only
        return f"{name}{config}, split {data_arguments.get('dataset_split')}", hub_id
    if data_arguments.get("train_files"):
        return "local files: " + ", ".join(Path(f).name for f in data_arguments["train_files"]), None
    return EMBEDDED_CORPUS_DESCRIPTION, None


def checkpoint_eval_loss(eval_losses: dict[int, float] | None, step: int, checkpoint_name: str) -> str:
    """The eval loss of a checkpoint card: the one logged at `step` ({step: loss} of the checkpoint's own
    trainer_state.json, None without one), else the latest one before it, saying at which step."""
    if eval_losses is None:
        return f"not recorded ({checkpoint_name} has no trainer_state.json)"
    before = [logged for logged in eval_losses if logged <= step]
    if not before:
        return f"none logged by step {step:,}"
    latest = max(before)
    if latest == step:
        return f"{eval_losses[latest]:.4f} at step {step:,}"
    return f"{eval_losses[latest]:.4f} at step {latest:,}, the latest evaluation before step {step:,}"


@dataclass(frozen=True)
class Training:
    """What a card says about pre-training, as plain values. On a checkpoint's card (`at_checkpoint`), `steps` is the
    checkpoint's and `run_steps` the whole run's."""

    dataset: str
    steps: int
    global_batch_size: int
    max_seq_length: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    world_size: int
    learning_rate: float
    warmup_steps: int
    lr_scheduler_type: str
    weight_decay: float
    adam_beta1: float
    adam_beta2: float
    adam_epsilon: float
    precision: str  # "bf16", "fp16" or "fp32"
    seed: int
    machine: str  # one process's device
    train_runtime: float | None  # seconds
    final_eval_loss: float
    run_steps: int | None = None
    checkpoint_eval_loss: str | None = None

    def at_checkpoint(self, step: int, eval_losses: dict[int, float] | None, checkpoint_name: str) -> "Training":
        """This run's facts as of checkpoint-`step`, with its own eval loss ({step: loss} or None, see
        `checkpoint_eval_loss`)."""
        loss = checkpoint_eval_loss(eval_losses, step, checkpoint_name)
        return replace(self, steps=step, run_steps=self.steps, checkpoint_eval_loss=loss)

    @property
    def tokens(self) -> int:
        return self.steps * self.global_batch_size * self.max_seq_length

    @property
    def batch_layout(self) -> str:
        return (
            f"{self.per_device_train_batch_size} per device × {counted(self.gradient_accumulation_steps, 'accumulation step')}"
            f" × {counted(self.world_size, 'process', 'processes')}"
        )

    @property
    def hardware(self) -> str:
        return self.machine if self.world_size == 1 else f"{self.world_size} × {self.machine}"

    @property
    def runtime(self) -> str:
        runtime = self.train_runtime
        return "not recorded" if runtime is None else f"{runtime / 3600:.2f} h ({runtime:,.0f} s)"

    @property
    def eval_loss(self) -> str | None:
        return f"{self.final_eval_loss:.4f}" if self.run_steps is None else self.checkpoint_eval_loss


@dataclass(frozen=True)
class MadeFrom:
    """How a model was made from a pretrained BERT, as its card tells it: training_summary.json's "made_from"
    (symbert-pretrain --init_from / --teacher, with symbert-convert's conversion.json), and whether it carries the
    teacher's sentence-transformers configuration."""

    teacher: str | None  # a Hub id, or a local folder's name
    license: str | None  # the teacher's, from its card
    architecture: str | None
    mlm_head: bool  # the teacher had one, so the distillation trained this model's
    base_model: str | None  # the teacher's Hub id: --base_model, else its name where that is a Hub id
    conversion: ConversionRecord | None
    sentence_transformers: bool

    @classmethod
    def read(
        cls, record: MadeFromRecord | None, base_model: str | None, sentence_transformers: bool
    ) -> "MadeFrom | None":
        if record is None:
            return None
        teacher, conversion = record.teacher or Teacher(), record.conversion
        name = teacher.name or (conversion and conversion.bert)
        if base_model is None and is_hub_id(name):  # a name the Hub would refuse links nowhere
            base_model = name
        return cls(
            teacher=name,
            license=teacher.license or (conversion and conversion.bert_license),
            architecture=teacher.architecture,
            mlm_head=bool(teacher.mlm_head),
            base_model=base_model,
            conversion=conversion,
            sentence_transformers=sentence_transformers,
        )

    @property
    def distilled(self) -> bool:
        return self.architecture is not None

    @property
    def teacher_text(self) -> str:
        name = f"[{self.base_model}](https://huggingface.co/{self.base_model})" if self.base_model else self.heading
        licence = f"licence {escaped(self.license)}" if self.license else "licence not stated in its card"
        return f"{name} ({licence})"

    @property
    def heading(self) -> str:
        """The teacher's name for the card's "Made from" heading: its Hub id, else its recorded name, escaped."""
        return self.base_model or code(self.teacher)

    @property
    def loss(self) -> str:
        text = "the normalised error of every layer's hidden states against the teacher's"
        return text + (", plus the KL divergence of its masked-token distributions" if self.mlm_head else "")

    @property
    def architecture_code(self) -> str | None:
        return code(self.architecture) if self.architecture else None

    @property
    def conversion_shown(self) -> dict | None:
        """The conversion's values as the card's "Made from" section shows them (card_template.md words them)."""
        conversion = self.conversion
        if conversion is None:
            return None
        cosine = conversion.held_out_mean_cosine
        return dict(
            attention_type=code(conversion.attention_type),
            fit_texts=escaped(conversion.fit_texts),
            calibration=escaped(shown(conversion.calibration)),
            held_out_texts=escaped(conversion.held_out_texts),
            fitted=conversion.layers_fitted,
            layers=len(conversion.layers),
            errors="; ".join(
                f"layer {row.layer} {row.copy_error:.3f} → {row.fit_error:.3f}"
                for row in conversion.layers
                if isinstance(row.copy_error, (int, float)) and isinstance(row.fit_error, (int, float))
            ),
            cosines=None
            if cosine.copy is None or cosine.fit is None
            else f"{cosine.copy:.3f} copied, {cosine.fit:.3f} fitted",
        )


def auto_class(bert_class: str) -> str:
    """The Auto class that loads a BERT class: BertForMaskedLM -> AutoModelForMaskedLM, BertModel -> AutoModel."""
    return "AutoModel" + bert_class.removeprefix("Bert").removeprefix("Model")


@dataclass(frozen=True)
class BertExport:
    """What the cards say about a model's plain BERT export (the `bert` branch), as measured on the export."""

    architecture: str  # the transformers class, e.g. "BertForMaskedLM"
    parameters: int  # counted as num_parameters() of that class (tied decoder counted once)
    difference: float  # largest relative difference of its outputs from the SymBERT model's (bert_export)

    @classmethod
    def measure(cls, folder: str | Path, difference: float) -> "BertExport":
        """The export written in `folder` (by bert_export.export_to_bert, which measured `difference`): its class,
        and its parameters counted on the meta device from its config.json."""
        config = transformers.AutoConfig.from_pretrained(folder)
        with torch.device("meta"):
            parameters = getattr(transformers, config.architectures[0])(config).num_parameters()
        return cls(config.architectures[0], parameters, difference)

    @property
    def auto_class(self) -> str:
        return auto_class(self.architecture)

    @property
    def measured(self) -> str:
        """How close the export's outputs are to the SymBERT model's, in words."""
        return (
            f"largest relative difference {self.difference:.1e} over the logits and every layer's hidden states on a "
            f"fixed padded batch of {CHECK_BATCH[0]} × {CHECK_BATCH[1]} tokens; the release refuses an export above "
            f"{BOUND:.0e}"
        )


def bert_export_notes(attention_type: str, parameters: int, bert: BertExport) -> list[str]:
    """What the plain BERT export costs and what fine-tuning it means, from the SymBERT model's parameter count and
    the export's (both cards say it: main's "Use it as plain BERT" section and the `bert` branch's card): the notes
    of BERT_NOTES_TEMPLATE, one a line."""
    change = parameter_change(bert.parameters, parameters)
    template = jinja2.Template(BERT_NOTES_TEMPLATE.read_text(encoding="utf-8"))
    text = template.render(attention_type=attention_type, parameters=parameters, bert=bert, parameter_change=change)
    return text.splitlines()


def checkpoint_title(name: str, step: int) -> str:
    return f"{name} at step {step}"


def implementation_choices(config: SymBertConfig) -> list[str]:
    """What the papers leave open, as this implementation fixes it."""
    attention = attention_class(config.attention_type)
    items = attention.implementation_choices(config)
    scale = attention.score_scale(config)
    scaling = "1/√d, as in BERT" if scale == 1 else f"1/({1 / scale:g}√d) (see above)"
    return items + [f"Every score is scaled by {scaling}, and attention-probability dropout applies as in BERT."]


def counted(number: int, singular: str, plural: str | None = None) -> str:
    """ "1 process", "2 processes"."""
    return f"{number:,} {singular if number == 1 else plural or singular + 's'}"


def indefinite_article(number: int) -> str:
    """ "an" before a number read with a vowel sound (8, 11, 18, 80-89, 800, 8,192, 11,000, ...), else "a"."""
    leading = f"{number:,}".split(",")[0]
    return "an" if leading.startswith("8") or leading in ("11", "18") else "a"


# A model of the `tiny` preset (the CPU demo's) demonstrates the pipeline; it is too small to fine-tune from.
DEMONSTRATION_SIZES = ("tiny",)


def seeds_text(results: GlueResults) -> str:
    return ", ".join(map(str, results.seeds))


def card_values(
    config: SymBertConfig,
    repo_id: str,
    revision: str,
    kind: str,
    provenance: dict,
    *,
    size: str | None = None,
    training: Training | None = None,
    results: GlueResults | None = None,
    bert: BertExport | None = None,
    made_from: MadeFrom | None = None,
    baselines: list[tuple[str, GlueResults]] = (),
) -> dict:
    """Every value card_template.md (and bert_card_template.md) reads but the GLUE files' names: from the model's
    config, the repository, the provenance record, for trained models their `Training` and (release cards) their
    glue_results.json, and the plain BERT export on the `bert` branch when there is one."""
    parameters, original = parameter_counts(config)
    if training is not None:  # --dataset, --hardware or as recorded: free text, shown as written
        training = replace(training, dataset=escaped(training.dataset), machine=escaped(training.machine))
    values = dict(
        kind=kind,
        repo_id=repo_id,
        revision=revision,
        attention_type=config.attention_type,
        attention_types=[f"`{name}`" for name in ATTENTION_TYPES],
        size=size,
        formula=attention_class(config.attention_type).formula,
        parameters=parameters,
        original_parameters=original,
        parameter_change=parameter_change(parameters, original),
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        hidden_size=config.hidden_size,
        head_size=config.hidden_size // config.num_attention_heads,
        intermediate_size=config.intermediate_size,
        vocab_size=config.vocab_size,
        max_positions=config.max_position_embeddings,
        provenance=provenance,
        choices=implementation_choices(config),
        demonstration=size in DEMONSTRATION_SIZES,  # the intended uses say it is too small to fine-tune from
        install=install_command(),
        citations="\n\n".join(attention_class(config.attention_type).papers.values()),
        vocab_article=indefinite_article(config.vocab_size),
        embedded_corpus=training is not None and training.dataset == EMBEDDED_CORPUS_DESCRIPTION,
        made_from=made_from,
        training=training,
        bert=bert,
        bert_notes=bert_export_notes(config.attention_type, parameters, bert) if bert else [],
        benchmark=benchmark_name(),
    )
    if results is not None:
        values.update(
            benchmark=results_benchmark(results),
            glue_score_shown=results_benchmark(results) == benchmark_name(),
            glue_table=glue_table(results, baselines),
            baseline_models=[escaped(label) for label, _ in baselines],
            glue_baselines=glue_baselines_text(results),
            seeds=seeds_text(results),
            protocol=protocol_text(results.protocol),
            glue_data=glue_data_text(results),
            glue_on_hub=scored_on_hub(results),
            glue_mean=mean_score_text(),
            leaderboards=hub_datasets(glue_mean_tasks()).split(", "),
        )
    return values
