"""From a BERT to a distilled SymBERT variant in one command: the conversion, then a transfer in two stages.

    symbert-transfer BERT OUTPUT --attention_type T [--minutes 60] [--train_files FILE ...]
    symbert-transfer models/all-MiniLM-L6-v2 outputs/minilm-shared --attention_type shared --minutes 30

1. conversion (symbert-convert): each layer's attention fitted to BERT's in closed form, BERT's attention output
   projection kept (--output_scale false, the default here) -> OUTPUT/stages/convert;
2. attention (symbert-pretrain --distill_stage attention): only the self-attention trained, each layer on the
   teacher's layer inputs, to reproduce the teacher's attention output -> OUTPUT/stages/attention;
3. model (--distill_stage model): the whole encoder trained on the teacher's hidden states, its mean-pooled sentence
   embedding and, where it has one, its MLM distribution -> OUTPUT/stages/model.

Each training stage gets its share of --minutes, turned into steps by timing one step first, and ends earlier when
its held-out loss stops improving; each logs and checkpoints as pre-training does. The agreement with BERT (mean
cosine of held-out sentence embeddings) is printed before and after each stage. Then OUTPUT holds the teacher's kind
of model (BertModel -> SymBertModel with its pooler, BertForMaskedLM -> SymBertForMaskedLM, a classifier ->
SymBertForSequenceClassification with its head) with the distilled encoder, its tokenizer, BERT's
sentence-transformers files, conversion.json, transfer.json (the settings and the agreement after each stage), and
OUTPUT/bert, its plain-BERT export. Stopped (Ctrl-C, a kill), the same command goes on where it stopped: a finished
stage is kept, a running one resumes from its last checkpoint.
"""

import contextlib
import json
import math
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from filelock import FileLock, Timeout
from transformers import AutoConfig, AutoTokenizer

from .. import modeling_symbert
from ..attention_symbert import ATTENTION_TYPES, SymBertSelfAttention, attention_class
from ..cli import Interrupted, UserError, command_parser, run_command
from ..conversion_symbert import calibration_sequences
from ..files import write_atomically
from ..json_files import load_json, read_json
from ..tools import written_folder
from ..tools.conversion_record import ConversionRecord
from ..tools.convert import calibration_texts, embedding_cosine, load_bert, quiet_loading, sentence_embeddings
from .data.corpus_files import file_problem
from .distillation import DistillationLoss, initial_model, load_teacher

LOCK_FILE = ".transfer.lock"  # held while a run uses the folder: a second one into it is refused
FILE_CHECK_BYTES = 1 << 20  # of each --train_files file, read before anything is written (the stage reads the rest)
PLAN_FILE = "transfer-plan.json"  # the settings of the run in this folder: a rerun with others is refused
RECORD_FILE = "transfer.json"  # written last: the folder is complete
STAGES = ("attention", "model")
# Measured on all-MiniLM-L6-v2 (benchmarks/results/real-minilm-transfer/): see its README for the ablation.
DEFAULTS = dict(
    minutes=60.0,
    attention_share=0.2,  # of --minutes for stage 2 (the attention alone); the rest for stage 3
    # the conversion's fits at α = 1: from the scaled conversion symmetric and mhe_add start closer to MiniLM but end
    # no closer after the same stages, and 0.4-2.6 points lower downstream (the study's sixth and seventh rounds)
    output_scale=False,
    attention_learning_rate=1e-3,
    model_learning_rate=2e-4,
    batch_size=16,
    max_seq_length=128,
    eval_blocks=64,
    evaluations=10,  # per stage: the held-out loss is measured (and a checkpoint saved) this many times
    patience=3,  # evaluations without a 0.5% better held-out loss end a stage
    # MiniLM's relation losses, off: after 60 steps of the attention stage neither the attention maps (shared
    # 0.664 -> 0.635, symmetric 0.706 -> 0.706) nor the value relations (shared 0.664 -> 0.656, mhe_add 0.590 ->
    # 0.584) raised the held-out cosine
    attention_map_loss_weight=0.0,
    value_relation_loss_weight=0.0,
)


@dataclass
class TransferPlan:
    """What the run in OUTPUT was started with; a rerun goes on only with the same."""

    bert: str
    attention_type: str
    minutes: float | None  # None where the run was given --steps
    total_steps: int | None
    attention_share: float
    train_files: list[str] | None
    calibration_files: list[str] | None
    seed: int = 42  # of both stages (data order and initialisation); earlier plans ran with 42
    output_scale: bool = True  # the conversion's (symbert-convert --output_scale); earlier plans converted with it
    seconds_per_step: float | None = None  # timed once, on the first run
    steps: dict | None = None  # stage -> max_steps


def parse_command_line(argv):
    parser = command_parser(__doc__.split("\n\n")[0])
    parser.add_argument("bert", help="a BERT folder or Hub id (config.json, weights, tokenizer)")
    parser.add_argument("output", help="the folder to write; an unfinished run there goes on")
    parser.add_argument("--attention_type", required=True, help=f"one of {', '.join(ATTENTION_TYPES)}")
    parser.add_argument("--minutes", type=float, default=DEFAULTS["minutes"], help="training time of the two stages")
    parser.add_argument(
        "--steps", type=int, default=None, help="training steps of the two stages instead of --minutes (not timed)"
    )
    parser.add_argument(
        "--attention_share", type=float, default=DEFAULTS["attention_share"], help="share of --minutes for stage 2"
    )
    parser.add_argument(
        "--train_files", nargs="+", default=None, help="text files to distil on (default: the embedded corpus)"
    )
    parser.add_argument("--calibration_files", nargs="+", default=None, help="symbert-convert's calibration text")
    parser.add_argument("--seed", type=int, default=42, help="the stages' seed (data order, initialisation)")
    parser.add_argument(
        "--output_scale",
        choices=["true", "false"],
        default=str(DEFAULTS["output_scale"]).lower(),
        help="symbert-convert's --output_scale: true scales each kept fit's output by its least-squares α ≤ 1, false "
        "keeps BERT's output projection, which the stages start best from",
    )
    args = parser.parse_args(argv)
    if args.attention_type not in ATTENTION_TYPES:
        raise UserError(f"--attention_type {args.attention_type!r} is unknown; allowed: {', '.join(ATTENTION_TYPES)}.")
    if attention_class(args.attention_type).fit_bert is SymBertSelfAttention.fit_bert:
        raise UserError(f"--attention_type {args.attention_type!r} has no fit to BERT's attention (no fit_bert).")
    if not (math.isfinite(args.minutes) and 0 < args.minutes <= 7 * 24 * 60):
        raise UserError(f"--minutes={args.minutes} must be a number of minutes above 0 and at most a week (10080).")
    if args.steps is not None and args.steps < 2:
        raise UserError(f"--steps={args.steps} must be at least 2 (one a stage), or left out to use --minutes.")
    if not 0 <= args.seed < 2**32:  # what numpy's and torch's seeding take
        raise UserError(f"--seed={args.seed} must be a whole number from 0 to {2**32 - 1}.")
    if not (math.isfinite(args.attention_share) and 0 <= args.attention_share < 1):
        raise UserError(f"--attention_share={args.attention_share} must be at least 0 and below 1.")
    for name in args.train_files or ():
        if not Path(name).is_file():
            raise UserError(f"--train_files {name!r} is not a file.")
        if problem := file_problem(Path(name), "text", limit=FILE_CHECK_BYTES):
            raise UserError(f"--train_files {name} {problem}")
    return args


def the_plan(args, output: Path) -> TransferPlan:
    """The plan of a new run, or the recorded one of the run OUTPUT holds, refused if the arguments differ."""
    plan = TransferPlan(
        bert=str(Path(args.bert).resolve()) if Path(args.bert).exists() else args.bert,
        attention_type=args.attention_type,
        minutes=None if args.steps is not None else args.minutes,
        total_steps=args.steps,
        attention_share=args.attention_share,
        train_files=[str(Path(f).resolve()) for f in args.train_files] if args.train_files else None,
        calibration_files=[str(Path(f).resolve()) for f in args.calibration_files] if args.calibration_files else None,
        seed=args.seed,
        output_scale=args.output_scale == "true",
    )
    recorded_file = output / PLAN_FILE
    if not recorded_file.is_file():
        if output.exists() and (not output.is_dir() or any(i.name != LOCK_FILE for i in output.iterdir())):
            raise UserError(
                f"output={str(output)!r} exists and holds no {PLAN_FILE} of an earlier run; choose a new folder."
            )
        return plan
    try:
        recorded = TransferPlan(**load_json(recorded_file))
        if recorded.total_steps is not None:  # earlier versions recorded --minutes' default beside --steps
            recorded.minutes = None
        steps = recorded.steps or {}
        if set(steps) - set(STAGES) or not all(type(value) is int and value >= 0 for value in steps.values()):
            raise ValueError(f"its steps {recorded.steps!r} are not a number of steps for each of {STAGES}")
    except (OSError, ValueError, RecursionError, TypeError, AttributeError) as error:
        raise UserError(f"{recorded_file} is damaged ({error}); choose a new output folder.") from None
    differing = [
        f"{name} {getattr(plan, name)!r} (the run's {getattr(recorded, name)!r})"
        for name in (
            "bert",
            "attention_type",
            "minutes",
            "total_steps",
            "attention_share",
            "train_files",
            "calibration_files",
            "seed",
            "output_scale",
        )
        if getattr(plan, name) != getattr(recorded, name)
    ]
    if differing:
        raise UserError(
            f"output={str(output)!r} holds a run started with other settings: {'; '.join(differing)}. Rerun it with "
            "its own settings to finish it, or choose a new folder."
        )
    return recorded


def save_plan(plan: TransferPlan, output: Path) -> None:
    write_atomically(output / PLAN_FILE, lambda file: file.write(json.dumps(asdict(plan), indent=2) + "\n"))


def seconds_per_step(student_folder: Path, teacher: str) -> float:
    """The seconds one training step of stage 3 takes here (the dearer stage): two timed after one to warm up."""
    config = AutoConfig.from_pretrained(student_folder)
    config.sparse_prediction = True
    tokenizer = AutoTokenizer.from_pretrained(student_folder)
    text_tokens = (tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id)
    with quiet_loading():
        student = initial_model(str(student_folder), config).train()
        loss = DistillationLoss(load_teacher(teacher, config), "model", text_tokens=text_tokens)
    length = min(DEFAULTS["max_seq_length"], config.max_position_embeddings)
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, config.vocab_size, (DEFAULTS["batch_size"], length), generator=generator)
    # texts of 16 tokens, [CLS] ... [SEP], as the blocks hold them (a classifier teacher reads each again alone)
    input_ids[:, ::16], input_ids[:, 15::16] = text_tokens[0], text_tokens[1]
    labels = torch.where(torch.rand(input_ids.shape, generator=generator) < 0.15, input_ids, -100)
    inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}
    times = []
    for _ in range(3):
        start = time.perf_counter()
        loss(student, inputs).backward()
        times.append(time.perf_counter() - start)
    return sum(times[1:]) / 2


def stage_arguments(plan: TransferPlan, stage: str, init_from: Path, output_dir: Path) -> list[str]:
    """symbert-pretrain's command line for a training stage."""
    steps = plan.steps[stage]
    length = min(DEFAULTS["max_seq_length"], AutoConfig.from_pretrained(init_from).max_position_embeddings)
    every = max(1, steps // DEFAULTS["evaluations"])
    arguments = [
        "--init_from",
        str(init_from),
        "--teacher",
        plan.bert,
        "--distill_stage",
        stage,
        "--output_dir",
        str(output_dir),
        "--max_seq_length",
        str(length),
        "--per_device_train_batch_size",
        str(DEFAULTS["batch_size"]),
        "--per_device_eval_batch_size",
        str(DEFAULTS["batch_size"]),
        "--learning_rate",
        str(DEFAULTS[f"{stage}_learning_rate"]),
        "--lr_scheduler_type",
        "linear",
        "--warmup_steps",
        str(max(1, steps // 20)),
        "--weight_decay",
        "0.01",
        "--max_steps",
        str(steps),
        "--eval_strategy",
        "steps",
        "--eval_steps",
        str(every),
        "--eval_on_start",
        "true",
        "--eval_blocks",
        str(DEFAULTS["eval_blocks"]),
        "--save_strategy",
        "steps",
        "--save_steps",
        str(every),
        "--logging_steps",
        str(max(1, every // 5)),
        "--stop_when_flat",
        str(DEFAULTS["patience"]),
        "--value_relation_loss_weight",
        str(DEFAULTS["value_relation_loss_weight"]),
        "--config_overrides",
        json.dumps({"sparse_prediction": True, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}),
        "--report_to",
        "none",
        "--seed",
        str(plan.seed),
    ]
    if not torch.cuda.is_available():
        arguments += ["--use_cpu", "true"]
    if stage == "attention":
        arguments += ["--attention_map_loss_weight", str(DEFAULTS["attention_map_loss_weight"])]
    if plan.train_files:
        arguments += ["--train_files", *plan.train_files]
    return arguments


def run_stage(arguments: list[str], stage: str) -> None:
    """symbert-pretrain in a child process (its output shown as it comes); Ctrl-C stops it where it is."""
    command = Path(sys.executable).with_name("symbert-pretrain")
    command = [str(command)] if command.is_file() else [sys.executable, "-m", "symbert.training.pretrain"]
    child = subprocess.Popen([*command, *arguments])
    try:
        status = child.wait()
    except KeyboardInterrupt:
        try:
            child.wait(timeout=60)  # it received the Ctrl-C too, and says which checkpoint is its last
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGKILL)
        raise Interrupted(
            f"stage {stage!r} stopped; what was done is kept: run the same command again to go on from its last "
            "checkpoint."
        ) from None
    if status == 130:
        raise Interrupted(f"stage {stage!r} stopped; run the same command again to go on from its last checkpoint.")
    if status != 0:
        raise UserError(f"stage {stage!r} failed (symbert-pretrain exit status {status}; its message is above).")


def agreement(folder: Path, bert_embeddings: torch.Tensor, sequences) -> float:
    """Mean cosine of FOLDER's held-out sentence embeddings to BERT's (`sentence_embeddings(bert, sequences)`, made
    once for all the folders a run or a curve compares)."""
    with quiet_loading():
        model = modeling_symbert.SymBertModel.from_pretrained(folder, add_pooling_layer=False).eval()
    return embedding_cosine(sentence_embeddings(model, sequences), bert_embeddings)


def assemble(converted: Path, distilled: Path, output: Path) -> None:
    """OUTPUT's model: the converted folder's class and heads (the teacher's kind: its pooler, classifier or MLM head),
    the distilled encoder (and the distilled MLM head where the teacher has one, which stage 3 trained), the
    converted folder's tokenizer and carried files; staged in a hidden folder beside OUTPUT, then moved into it
    (`written_folder`), transfer.json last."""
    config = AutoConfig.from_pretrained(converted)
    class_name = (config.architectures or ["SymBertModel"])[0]
    with quiet_loading():
        # float32, as the stages trained: a teacher stored in float16 leaves a float16 conversion
        model = getattr(modeling_symbert, class_name).from_pretrained(converted).float().eval()
        trained = modeling_symbert.SymBertForMaskedLM.from_pretrained(distilled).state_dict()
    state = model.state_dict()
    prefix = "" if class_name == "SymBertModel" else "bert."
    for name, tensor in trained.items():
        # the encoder always; the MLM head only into a model that has one (the teacher's, distilled toward)
        target = prefix + name[len("bert.") :] if name.startswith("bert.") else name
        if target in state and state[target].shape == tensor.shape and ".pooler." not in f".{target}":
            state[target] = tensor
    model.load_state_dict(state)
    # an entry an assembly stopped while moving left in OUTPUT is replaced whole
    with written_folder(output, ".assemble.tmp", "the assembled model", "assembling", "merge") as staging:
        model.save_pretrained(staging)
        for item in converted.iterdir():
            if item.name not in ("config.json", "model.safetensors") and not (staging / item.name).exists():
                (shutil.copytree if item.is_dir() else shutil.copyfile)(item, staging / item.name)


def transfer(argv):
    args = parse_command_line(argv)
    output = Path(args.output)
    plan = the_plan(args, output)
    if (output / RECORD_FILE).is_file():
        print(f"{output} is complete (its {RECORD_FILE} is written): nothing to do.")
        return read_json(output / RECORD_FILE)
    # BERT, its tokenizer and the calibration text are checked before OUTPUT is made: a typo leaves nothing behind
    config, bert, tokenizer = load_bert(plan.bert)
    _, held_out_texts = calibration_texts(args.calibration_files, 64)
    output.mkdir(parents=True, exist_ok=True)
    with folder_lock(output):
        return run_stages(args, plan, output, config, bert, tokenizer, held_out_texts)


@contextlib.contextmanager
def folder_lock(output: Path):
    """OUTPUT/.transfer.lock held (an OS lock: a killed run releases it) while this run uses the folder."""
    lock = FileLock(output / LOCK_FILE)
    try:
        lock.acquire(blocking=False)
    except Timeout:
        raise UserError(
            f"output={str(output)!r} is in use by another symbert-transfer (it holds {output / LOCK_FILE}); wait for "
            "it to end, or choose another folder."
        ) from None
    try:
        yield
    finally:
        lock.release()


def run_stages(args, plan: TransferPlan, output: Path, config, bert, tokenizer, held_out_texts) -> dict:
    """The stages of the run in OUTPUT that are not done yet, then the assembled model and its record."""
    save_plan(plan, output)
    stages = output / "stages"
    converted = stages / "convert"
    if not (converted / ConversionRecord.FILE_NAME).is_file():
        print(f"Stage 1 of 3: converting {args.bert} to {args.attention_type}")
        convert_arguments = [args.bert, str(converted), "--attention_type", args.attention_type]
        if args.calibration_files:
            convert_arguments += ["--calibration_files", *args.calibration_files]
        convert_arguments += ["--output_scale", str(plan.output_scale).lower()]
        from ..tools.convert import convert

        with quiet_loading():
            convert(convert_arguments)
    conversion = ConversionRecord.read(converted)
    sequences = calibration_sequences(tokenizer, held_out_texts, min(128, config.max_position_embeddings))
    bert_embeddings = sentence_embeddings(bert, sequences)
    cosines = {
        "copy": conversion.held_out_mean_cosine.copy,
        "convert": agreement(converted, bert_embeddings, sequences),
    }
    print(f"Agreement with BERT (held-out sentence embeddings, mean cosine): converted {cosines['convert']:.4f}")
    if plan.steps is None:
        if plan.total_steps is None:
            plan.seconds_per_step = seconds_per_step(converted, plan.bert)
            total = plan.minutes * 60 / plan.seconds_per_step
        else:
            total = plan.total_steps
        plan.steps = {
            "attention": max(1, round(total * plan.attention_share)) if plan.attention_share else 0,
            "model": max(1, round(total * (1 - plan.attention_share))),
        }
        save_plan(plan, output)
    if plan.seconds_per_step is not None and not any((stages / stage).exists() for stage in STAGES):
        print(
            f"One training step takes {plan.seconds_per_step:.2f} s here: {plan.minutes:g} minutes are "
            f"{plan.steps['attention']} steps of the attention stage and {plan.steps['model']} of the model stage "
            "(each ends earlier when its held-out loss stops improving)."
        )
    previous = converted
    for number, stage in enumerate(STAGES, start=2):
        if not plan.steps[stage]:
            continue
        folder = stages / stage
        if not (folder / "training_summary.json").is_file():
            print(f"Stage {number} of 3: {stage} ({plan.steps[stage]} steps at most)")
            run_stage(stage_arguments(plan, stage, previous, folder), stage)
        cosines[stage] = agreement(folder, bert_embeddings, sequences)
        print(f"Agreement with BERT after stage {number} ({stage}): {cosines[stage]:.4f}")
        previous = folder
    assemble(converted, previous, output)
    from ..tools.bert_export import export_to_bert

    if not (output / "bert" / "config.json").is_file():
        shutil.rmtree(output / "bert", ignore_errors=True)
        with quiet_loading():
            export_to_bert(str(output), output / "bert")
    final = agreement(output, bert_embeddings, sequences)
    published = asdict(plan)  # a local path by its name only: the record may be published, a home layout must not be
    for key in ("bert", "train_files", "calibration_files"):
        value = published[key]
        if isinstance(value, str) and Path(value).exists():
            published[key] = Path(value).name
        elif isinstance(value, list):
            published[key] = [Path(item).name for item in value]
    record = {
        "plan": published,
        "held_out_mean_cosine": {**cosines, "final": final},
        "stages": {
            stage: json.loads((stages / stage / "training_summary.json").read_text(encoding="utf-8"))["steps"]
            for stage in STAGES
            if plan.steps[stage]
        },
    }
    write_atomically(output / RECORD_FILE, lambda file: file.write(json.dumps(record, indent=2) + "\n"))
    print(
        f"{args.attention_type} from {args.bert}: held-out sentence-embedding cosine to BERT's, copy "
        f"{cosines['copy']:.4f} -> converted {cosines['convert']:.4f} -> "
        + " -> ".join(f"{stage} {cosines[stage]:.4f}" for stage in STAGES if stage in cosines)
        + f". Written: {output}"
    )
    return record


def main(argv=None) -> None:
    run_command(transfer, argv)


if __name__ == "__main__":
    main()
