"""Convergence of the attention types: pre-train each type with several seeds on one recipe and compare, paired on
the seeds, how soon each leaves the unigram plateau and reaches the reference type's final eval loss.

    python benchmarks/convergence.py --seeds 1,2,3,4,5 --parallel 2 --plateau_margin 1.0 \
        --summary_dir benchmarks/results/convergence/cpu-d16-books -- --recipe cpu-demo --output_dir outputs/convergence \
        --max_steps 1200 --lr_scheduler_type constant_with_warmup --eval_steps 50 --eval_blocks 400

Everything after `--` goes to `symbert-pretrain` (a recipe and its overrides). `--types` takes attention types,
optionally with config fields, `TYPE+FIELD=VALUE` (e.g. `pairwise+pairwise_init=identity`); by default every
registered type and the variants each type's class names in `study_variants`, the first (`original`) being the
reference. The corpus is tokenised once for the study (OUTPUT_DIR/blocks, symbert-prepare-data's format, its held-out
split drawn with the first seed), and every run reads those blocks and held-out blocks; for one seed every type gets
the same initialisation seed, data order and masks, so each type is compared with the reference on the same seeds
(paired). Per run the study reads the eval-loss curve and scores
the final model and the unigram baseline (training-token frequencies) on the held-out masked tokens, and reports:

- plateau exit: the step at which the eval loss first falls `--plateau_margin` below the unigram baseline's (a model
  that has learnt only token frequencies sits at the baseline), interpolated linearly between the two evaluations
  around the crossing;
- the step at which the eval loss first reaches the reference's final eval loss on the same seed
  (`--target_eval_loss` sets one target for all), interpolated the same way;
- the final eval loss and top-1 accuracy of the masked tokens.

Each is given as mean ± std over seeds and as the paired difference to the reference: its mean, a 95% confidence
interval (Student's t over the seeds' differences) and the two-sided p-value of a paired t-test. Each run is
`symbert.training.pretrain.pretrain` in its own folder `OUTPUT_DIR/seed-S/TYPE`. A rerun of the same
command goes on where a stopped study stopped, as `symbert-pretrain --compare` does: a finished run (its folder holds
training_summary.json, whose arguments must be the study's) is not trained again, its results are read back; a
stopped run resumes from its newest checkpoint (with `--save_strategy no` it has none and starts again: pass
`--save_steps N` for long runs); the others train. `--overwrite_output_dir true` after `--` trains every run again.
`--parallel N` trains N runs at once, each in its own process with one thread; `--summarize_only` rebuilds the
summary from the finished runs in OUTPUT_DIR and trains nothing.
"""

import hashlib
import json
import math
import os
import shlex
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from itertools import zip_longest
from multiprocessing import get_context
from pathlib import Path

import matplotlib
import torch
from machine import describe_machine  # benchmarks/machine.py
from report import Stopwatch, load_text, markdown_table  # benchmarks/report.py
from scipy import stats
from transformers.trainer_utils import get_last_checkpoint

from symbert import ATTENTION_TYPES, SymBertConfig, attention_class, json_files
from symbert.cli import UserError, command_parser, run_command
from symbert.files import write_atomically
from symbert.json_files import JsonRefusal, NotRegularFile
from symbert.training.arguments import (
    check_output_dir,
    config_overrides,
    model_config,
    parse_arguments,
    unknown_name_message,
)
from symbert.training.comparison_reuse import finished_comparison_run
from symbert.training.compat import overwrite_requested
from symbert.training.data.prepared import prepared_once
from symbert.training.evaluation import held_out_scores, saved_model_scores
from symbert.training.figures import new_figure, save_figure
from symbert.training.pretrain import PREPARED_BLOCKS_DIR, TrainedRun, pretrain
from symbert.training.reporting import LogHistoryError, metric_series, read_log_history
from symbert.training.summary import TrainingSummary

SCORES_FILE = "convergence_scores.json"  # per run: the final model and the unigram baseline on the held-out tokens
RUN_RECORD = "convergence_run.json"  # in OUTPUT_DIR: the training run's command, machine, wall time and load
SUMMARY_FILE = TrainingSummary.FILE_NAME  # written last by a run: its presence marks the run as finished
LATE_EXIT_SHARE = (
    0.3  # a run's final loss is read past its plateau exit when at least this share of its steps follow it
)


def default_types():
    types = []
    for name in ATTENTION_TYPES:
        types.append(name)
        for variant in attention_class(name).study_variants:
            types.append("+".join([name, *(f"{key}={value}" for key, value in variant.items())]))
    return ",".join(types)


TOO_DEEP = "it is nested too deeply for Python's JSON parser"


def strict_json(text):
    """`text` parsed as JSON, refusing what Python's json accepts by default but a number or a record here cannot be:
    NaN and ±Infinity (also as 1e400), a key given twice in one object (json keeps the last silently), and nesting
    deeper than the parser's recursion, each as a JsonRefusal naming it (symbert/json_files.py's strict_json)."""
    try:
        return json_files.strict_json(text, finite=True)
    except RecursionError:
        raise JsonRefusal(TOO_DEEP) from None


def read_json_file(path, what="the file"):
    """The JSON value of the regular file `path`, read with strict_json; `what` says what it is in the messages. A
    path that is missing, not a regular file (a folder; a named pipe, which would wait for a writer: opened without
    waiting and refused before anything is read), empty, not UTF-8 or not strict JSON is a UserError naming it and
    the problem."""
    path = Path(path)
    try:
        return json_files.load_json(path, finite=True)
    except FileNotFoundError:
        raise UserError(f"{what} {path} does not exist") from None
    except OSError as error:
        raise UserError(f"{what} {path} cannot be read ({error.strerror})") from None
    except NotRegularFile as error:
        raise UserError(f"{what} {path} is {error.kind}, not a regular file: give a JSON file") from None
    except json.JSONDecodeError as error:
        if not error.doc.strip():
            raise UserError(f"{what} {path} is empty: give a JSON file") from None
        raise UserError(f"{what} {path} is not a readable JSON file ({error})") from None
    except ValueError as error:  # not UTF-8, or a JsonRefusal
        raise UserError(f"{what} {path} is not a readable JSON file ({error})") from None
    except RecursionError:
        raise UserError(f"{what} {path} is not a readable JSON file ({TOO_DEEP})") from None


def finite_number(value, where):
    """`value` as a float where it is a finite JSON number, else a UserError naming `where`: a boolean is not one,
    though Python's json reads true as the int 1."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            if math.isfinite(value):
                return float(value)
        except OverflowError:  # an integer past the largest float
            pass
    raise UserError(f"{where} is {json.dumps(value)[:40]}, not a finite number")


def whole_number(value, where, least=0):
    if isinstance(value, int) and not isinstance(value, bool) and value >= least:
        return value
    raise UserError(f"{where} is {json.dumps(value)[:40]}, not a whole number of at least {least}")


def parse_type(spec):
    """`TYPE` or `TYPE+FIELD=VALUE+...` -> (type, {field: value}); values are JSON where they parse as JSON."""
    name, *settings = spec.split("+")
    if name not in ATTENTION_TYPES:
        raise UserError(f"--types has {name!r}; allowed: {', '.join(ATTENTION_TYPES)} (optionally +FIELD=VALUE).")
    overrides = {}
    for setting in settings:
        key, equals, value = setting.partition("=")
        if not equals or not key:
            raise UserError(f"--types: {spec!r} must be TYPE or TYPE+FIELD=VALUE, not {setting!r} after a '+'.")
        try:
            overrides[key] = strict_json(value)
        except JsonRefusal as error:
            shown = spec if len(spec) <= 80 else f"{spec[:60]}... ({len(spec)} characters)"
            raise UserError(f"--types {shown!r}: the value of {key} is refused ({error}).") from None
        except json.JSONDecodeError:  # not JSON: a string
            overrides[key] = value
    known = SymBertConfig().to_dict()
    for key in overrides:
        if key not in known:
            raise UserError(f"--types {spec!r}: {unknown_name_message('SymBertConfig field', key, known)}.")
        if key == "attention_type":
            raise UserError(
                f"--types {spec!r}: name the attention type before the first '+' ({name!r}), not as a field."
            )
    return name, overrides


def parse_list(text, kind):
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise UserError(f"--{kind}={text!r} is empty; give a comma-separated list.")
    if len(set(items)) != len(items):
        raise UserError(f"--{kind}={text!r} repeats an entry; name each once.")
    return items


def parse_seed(text):
    try:
        seed = int(text)
    except ValueError:
        seed = None
    if seed is None or not 0 <= seed < 2**32:
        raise UserError(f"--seeds has {text!r}; each seed must be an integer in [0, 2**32 - 1], separated by commas.")
    return seed


def type_arguments(model_args, spec_overrides):
    """The model arguments of one type of the study: the type, and its fields over the recipe's config_overrides."""
    name, overrides = spec_overrides
    return replace(
        model_args, attention_type=name, config_overrides=json.dumps({**config_overrides(model_args), **overrides})
    )


def parse_command_line(argv):
    parser = command_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--types", default=None, help="comma-separated; default: every registered type and variant")
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--plateau_margin", type=float, default=0.2, help="nats below the unigram baseline")
    parser.add_argument("--target_eval_loss", type=float, default=None)
    parser.add_argument("--parallel", type=int, default=1, help="runs trained at once, each in its own process")
    parser.add_argument("--summarize_only", action="store_true", help="read the runs in OUTPUT_DIR, train nothing")
    parser.add_argument("--summary_dir", default=None, help="where convergence.md/.json/.png go (default: OUTPUT_DIR)")
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])  # --help ends here
    if split == len(argv):
        raise UserError("Put the pre-training arguments after `--`, e.g. `-- --recipe cpu-demo --output_dir DIR`.")
    args.types = parse_list(args.types or default_types(), "types")
    args.specs = {spec: parse_type(spec) for spec in args.types}
    args.seeds = [parse_seed(seed) for seed in parse_list(args.seeds, "seeds")]
    if args.parallel < 1:
        raise UserError(f"--parallel={args.parallel} must be at least 1.")
    if not (args.plateau_margin >= 0 and math.isfinite(args.plateau_margin)):
        raise UserError(f"--plateau_margin={args.plateau_margin} must be a finite number of nats, at least 0.")
    if args.target_eval_loss is not None and not math.isfinite(args.target_eval_loss):
        raise UserError(f"--target_eval_loss={args.target_eval_loss} must be a finite number.")
    if args.summary_dir is not None:
        check_output_dir(args.summary_dir, "summary_dir")
    run_args, model_args, data_args, training_args = parse_arguments(argv[split + 1 :])
    if run_args.compare:
        raise UserError("--compare is the single-seed comparison of symbert-pretrain; use --types here instead.")
    if training_args.resume_from_checkpoint:
        raise UserError(
            f"--resume_from_checkpoint={training_args.resume_from_checkpoint!r} would resume every run of the study "
            "from one checkpoint; drop it: run the same command again and each stopped run resumes from its own."
        )
    for spec, spec_overrides in args.specs.items():  # each type's model is checked now, not when its run starts
        try:
            config = model_config(type_arguments(model_args, spec_overrides))
        except UserError as error:
            raise UserError(f"--types {spec!r}: {error}") from None
        if data_args.max_seq_length > config.max_position_embeddings:
            raise UserError(
                f"--types {spec!r}: max_seq_length={data_args.max_seq_length} is above its "
                f"max_position_embeddings={config.max_position_embeddings}."
            )
    return args, run_args, model_args, data_args, training_args


def run_dir(training_args, spec, seed):
    return Path(training_args.output_dir) / f"seed-{seed}" / spec


def scores(output_dir, trained: TrainedRun | None = None):
    """The final model's and the unigram baseline's loss and top-1 accuracy on the run's held-out masked tokens,
    computed once and kept in the run folder: from what training built when `trained` holds it, else from the
    saved folder. The kept scores name the training summary they were computed for (its sha256): a run trained
    again in the folder (--overwrite_output_dir) is scored again."""
    path = Path(output_dir) / SCORES_FILE
    summary = hashlib.sha256((Path(output_dir) / SUMMARY_FILE).read_bytes()).hexdigest()
    cached = read_json(path)
    if isinstance(cached, dict) and cached.get("training_summary_sha256") == summary and valid_scores(cached, path):
        return cached
    if trained is not None and trained.model is not None:
        comparison = held_out_scores(trained.model, trained.held_out)
    else:
        comparison = saved_model_scores(output_dir)
    comparison["training_summary_sha256"] = summary
    write_atomically(path, lambda file: json.dump(comparison, file, indent=2))
    return comparison


def read_json(path):
    """A JSON file this script keeps as a cache, or None when it is missing or not strict JSON (it is computed again
    and replaced); a folder or named pipe in its place is refused (read_json_file), never opened or replaced."""
    path = Path(path)
    if path.exists() and not path.is_file():  # not opened (a named pipe would wait), and not replaced
        raise UserError(f"the kept file {path} is not a regular file (a folder or named pipe): remove it")
    try:
        return read_json_file(path, "the kept file")
    except UserError:
        return None


def valid_scores(cached, path):
    """Whether kept scores hold the numbers a summary reads, each finite (else they are computed again)."""
    try:
        for score in ("unigram", "model"):
            for key in ("loss", "accuracy"):
                finite_number(cached[score][key], f"{path}: {score}.{key}")
    except (UserError, KeyError, TypeError):
        return False
    return True


TRAINER_STATE_FILE = "trainer_state.json"  # a finished run's Trainer state: its log_history holds the eval losses


def run_log_history(folder):
    """The log_history of a finished run in `folder` (FOLDER/trainer_state.json), read as every reader of a Trainer
    log reads it (symbert.training.reporting's read_log_history: whole steps, finite eval losses and runtimes) and
    checked as the summary reads it: each evaluation at a step, given once and in order, at least one; anything else
    is a UserError naming the file and the entry."""
    path = Path(folder) / TRAINER_STATE_FILE
    try:
        history = read_log_history(path, lambda state: read_json_file(state, "the Trainer state"))
    except LogHistoryError as error:
        if error.field is None:
            raise UserError(f"{path} holds no log_history (a list of objects): it is not a Trainer state") from None
        expected = "a whole number of at least 0" if error.field == "step" else error.expected
        shown = json.dumps(error.value)[:40]
        raise UserError(f"{path}: log_history[{error.index}].{error.field} is {shown}, not {expected}") from None
    last_step = -1
    for index, entry in enumerate(history):
        if "eval_loss" not in entry:
            continue
        where = f"{path}: log_history[{index}]"
        step = whole_number(entry.get("step"), f"{where}.step")
        if step <= last_step:  # a step evaluated twice, or out of order: which loss counts is unknown
            raise UserError(f"{where} evaluates step {step} after step {last_step}: each step once, in order")
        last_step = step
    if last_step < 0:
        raise UserError(f"{path} holds no evaluation (no log_history entry with an eval_loss)")
    return history


def read_run_record(path):
    """The run record (RUN_RECORD) of the session that trained a study, checked as run_facts reads it; None when
    there is none."""
    if not os.path.lexists(path):
        return None
    run = read_json_file(path, "the run record")
    if not isinstance(run, dict):
        raise UserError(f"{path} is not a run record (a JSON object)")
    for key in ("command", "machine"):
        if not isinstance(run.get(key), str):
            raise UserError(f"{path}: {key} is {json.dumps(run.get(key))[:40]}, not a string")
    whole_number(run.get("parallel"), f"{path}: parallel", least=1)
    if finite_number(run.get("wall_seconds"), f"{path}: wall_seconds") < 0:
        raise UserError(f"{path}: wall_seconds is {run['wall_seconds']}, below 0")
    for key in ("load_average_start", "load_average_end"):
        loads = run.get(key)
        if not isinstance(loads, list) or len(loads) != 3:
            raise UserError(f"{path}: {key} is {json.dumps(loads)[:40]}, not 3 numbers (1, 5, 15 min)")
        for minutes, load in zip((1, 5, 15), loads):
            finite_number(load, f"{path}: {key} ({minutes} min)")
    counts = run.get("runs")  # absent from the records of versions that always trained every run
    if counts is not None:
        if not isinstance(counts, dict):
            raise UserError(f"{path}: runs is {json.dumps(counts)[:40]}, not an object")
        for key in ("trained", "resumed", "reused"):
            whole_number(counts.get(key), f"{path}: runs.{key}")
    return run


def train_one(run_args, model_args, data_args, training_args):
    torch.set_num_threads(1)  # one core per run: --parallel N uses N cores
    trained = pretrain(run_args, model_args, data_args, training_args)
    return trained.log_history, scores(training_args.output_dir, trained)


def stopped(training_args):
    """Whether the run's folder holds a checkpoint, which a rerun resumes from."""
    folder = Path(training_args.output_dir)
    return folder.is_dir() and get_last_checkpoint(folder) is not None


def without_overwrite(arguments):
    """`arguments` with --overwrite_output_dir off, where they hold it (ours under transformers 5, the Trainer's
    under 4.x)."""
    return replace(arguments, overwrite_output_dir=False) if hasattr(arguments, "overwrite_output_dir") else arguments


def run_all(args, run_args, model_args, data_args, training_args):
    """({(spec, seed): (log_history, scores)} for every type and seed, {"trained", "resumed", "reused": how many
    runs}). A finished run (its folder holds training_summary.json of the study's arguments, checked as --compare
    checks its types') is read back; the others are trained, a stopped one resuming from its newest checkpoint
    (pretrain does)."""
    if args.summarize_only:  # reads the finished runs, whatever the command says about overwriting them
        run_args, training_args = without_overwrite(run_args), without_overwrite(training_args)
    # Tokenise once for the study: every run reads the same prepared blocks and held-out blocks (the held-out split
    # of the first seed), prepared below before the first run trains; each seed still draws its own order and masks.
    blocks = Path(training_args.output_dir) / PREPARED_BLOCKS_DIR
    prepare = data_args.blocks_dir is None and not data_args.streaming
    study_data_args = replace(data_args, blocks_dir=str(blocks)) if prepare else data_args
    jobs = {
        (spec, seed): (
            run_args,
            type_arguments(model_args, spec_overrides),
            study_data_args,
            replace(training_args, seed=seed, output_dir=str(run_dir(training_args, spec, seed))),
        )
        for seed in args.seeds
        for spec, spec_overrides in args.specs.items()
    }
    # checked before anything trains; paths the runs recorded inside the study's folder are read in this one (a copy)
    root = training_args.output_dir
    finished = [key for key, job in jobs.items() if finished_comparison_run(*job, root=root)]
    if args.summarize_only and len(finished) < len(jobs):
        unfinished = [str(run_dir(training_args, spec, seed)) for spec, seed in jobs if (spec, seed) not in finished]
        raise UserError(
            f"--summarize_only: {len(unfinished)} of the {len(jobs)} runs are not finished (no {SUMMARY_FILE}): "
            f"{', '.join(unfinished)}; run the command without --summarize_only to train them."
        )
    results = {}
    for spec, seed in finished:
        folder = run_dir(training_args, spec, seed)
        if not args.summarize_only:
            print(f"{spec} seed {seed}: already trained in {folder} (it holds {SUMMARY_FILE}); its results are reused")
        results[spec, seed] = (run_log_history(folder), scores(folder))
    to_train = [key for key in jobs if key not in results]
    if to_train and prepare:
        prepared_once(data_args, blocks, args.seeds[0])
    resumed = [] if overwrite_requested(run_args, training_args) else [key for key in to_train if stopped(jobs[key][3])]
    counts = {"trained": len(to_train), "resumed": len(resumed), "reused": len(results)}
    if args.parallel == 1 or len(to_train) <= 1:
        results.update({key: train_one(*jobs[key]) for key in to_train})
    else:
        with ProcessPoolExecutor(min(args.parallel, len(to_train)), mp_context=get_context("spawn")) as pool:
            futures = {key: pool.submit(train_one, *jobs[key]) for key in to_train}
            try:
                results.update({key: future.result() for key, future in futures.items()})
            except BaseException:
                pool.shutdown(cancel_futures=True)  # the runs not started stay so; the running ones finish
                raise
    return {key: results[key] for key in jobs}, counts


def check_eval_steps(results, specs, seeds):
    """Refuses runs evaluated at other steps than the reference's first seed: the figures average the seeds' curves
    and subtract the reference's step by step (a run's trainer_state.json edited or from another study)."""
    first = (specs[0], seeds[0])
    steps = metric_series(results[first][0], "eval_loss")[0]
    for spec, seed in results:
        other = metric_series(results[spec, seed][0], "eval_loss")[0]
        if other != steps:
            index, mine, theirs = next(
                (index, mine, theirs)
                for index, (mine, theirs) in enumerate(zip_longest(other, steps, fillvalue="none"))
                if mine != theirs
            )
            raise UserError(
                f"{spec} seed {seed}'s evaluation {index + 1} is at step {mine} but {first[0]} seed {first[1]}'s at "
                f"step {theirs}: every run of a study is evaluated at the same steps (its trainer_state.json edited?)"
            )


def final_eval_loss(log_history):
    return metric_series(log_history, "eval_loss")[1][-1]


def crossing_step(log_history, target_loss):
    """The step at which the eval loss first falls to `target_loss`, interpolated linearly between the evaluation
    before and the first one at or below it (an evaluation interval would otherwise be the resolution); None if no
    evaluation reaches it."""
    steps, losses = metric_series(log_history, "eval_loss")
    for index, (step, loss) in enumerate(zip(steps, losses)):
        if loss <= target_loss:
            if index == 0:
                return float(step)
            previous_step, previous_loss = steps[index - 1], losses[index - 1]
            return previous_step + (previous_loss - target_loss) / (previous_loss - loss) * (step - previous_step)
    return None


def plateau_exit(log_history, baseline_loss, margin):
    return crossing_step(log_history, baseline_loss - margin)


def mean_std(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0}


def paired_difference(values, reference):
    """Mean of (value - reference) over the seeds where both exist, its 95% t confidence interval and the paired
    t-test's two-sided p-value (None where fewer than 2 seeds, or no spread, leave nothing to test)."""
    diffs = [v - r for v, r in zip(values, reference) if v is not None and r is not None]
    if not diffs:
        return None
    result = {"seeds": len(diffs), "mean": statistics.fmean(diffs), "ci95": None, "p": None}
    if len(diffs) > 1 and statistics.stdev(diffs) > 0:
        half = stats.t.ppf(0.975, len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))
        result["ci95"] = (result["mean"] - half, result["mean"] + half)
        result["p"] = float(stats.ttest_1samp(diffs, 0.0).pvalue)
    return result


METRICS = {  # key -> (column title, format of one value)
    "plateau_exit": ("plateau exit (step)", "{:.0f}"),
    "step_to_target": ("step to reach the target", "{:.0f}"),
    "final_eval_loss": ("final eval loss", "{:.4f}"),
    "top1": ("top-1 accuracy", "{:.2%}"),
}


def summarize(results, specs, seeds, targets, margin):
    """Per type: each metric per seed, as mean ± std, and paired against the first type on the same seeds."""
    per_run = {
        key: {
            "plateau_exit": plateau_exit(history, scores["unigram"]["loss"], margin),
            "step_to_target": crossing_step(history, targets[key[1]]),
            "final_eval_loss": final_eval_loss(history),
            "top1": scores["model"]["accuracy"],
        }
        for key, (history, scores) in results.items()
    }
    reference = specs[0]
    rows = []
    for spec in specs:
        row = {"attention_type": spec}
        for metric in METRICS:
            values = [per_run[spec, seed][metric] for seed in seeds]
            reference_values = [per_run[reference, seed][metric] for seed in seeds]
            row[metric] = {
                "per_seed": values,
                "mean_std": mean_std(values),
                "reached": sum(v is not None for v in values),
                "vs_reference": None if spec == reference else paired_difference(values, reference_values),
            }
        rows.append(row)
    return rows


def late_plateau_exits(rows, seeds, max_steps, share=LATE_EXIT_SHARE):
    """'TYPE seed S (step N)' or 'TYPE seed S (never)' for each run that leaves the plateau with less than `share` of
    its steps to go: its final loss is read on the plateau or just past it."""
    late = []
    for row in rows:
        for seed, step in zip(seeds, row["plateau_exit"]["per_seed"]):
            if step is None or step > (1 - share) * max_steps:
                late.append(f"{row['attention_type']} seed {seed} ({'never' if step is None else f'step {step:.0f}'})")
    return late


def format_mean_std(entry, fmt, num_seeds):
    if entry["mean_std"] is None:
        return "not reached"
    text = f"{fmt.format(entry['mean_std']['mean'])} ± {fmt.format(entry['mean_std']['std'])}"
    return text if entry["reached"] == num_seeds else f"{text} ({entry['reached']}/{num_seeds} seeds)"


def format_difference(difference, fmt, num_seeds):
    if difference is None:
        return "–"
    signed = fmt.replace("{:", "{:+")
    text = signed.format(difference["mean"])
    if difference["ci95"] is not None:
        low, high = difference["ci95"]
        text += f" [{signed.format(low)}, {signed.format(high)}], p = {difference['p']:.2g}"
    return text if difference["seeds"] == num_seeds else f"{text} ({difference['seeds']}/{num_seeds} seeds)"


def markdown_tables(rows, num_seeds):
    """The mean ± std table of every row, and the paired table of every row but the reference's."""

    def table(table_rows, cell):
        cells = [[row["attention_type"], *(cell(row[metric], fmt) for metric, (_, fmt) in METRICS.items())]
                 for row in table_rows]  # fmt: skip
        return markdown_table(["attention type", *(title for title, _ in METRICS.values())], cells)

    absolute = table(rows, lambda entry, fmt: format_mean_std(entry, fmt, num_seeds))
    paired = table(rows[1:], lambda entry, fmt: format_difference(entry["vs_reference"], fmt, num_seeds))
    return absolute, paired


def plot_mean_and_spread(ax, index, label, steps, per_step):
    """The mean of each step's values (one per seed) as a line, ±1 std shaded; the index picks the colour."""
    mean = [statistics.fmean(values) for values in per_step]
    std = [statistics.stdev(values) if len(values) > 1 else 0.0 for values in per_step]
    colour = matplotlib.colormaps["tab20"](index % 20)
    ax.plot(steps, mean, label=label, color=colour, linestyle="-" if index < 10 else "--")
    low, high = [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)]
    ax.fill_between(steps, low, high, color=colour, alpha=0.12)


def plot_curves(results, specs, seeds, baselines, path):
    """Mean eval loss per type against the step (log axis, from the first evaluation after step 0), shaded ±1 std
    over seeds, with the unigram baseline."""
    fig, ax = new_figure("eval loss (nats per masked token)", f"eval loss, mean ± std over {len(seeds)} seeds")
    ax.set_xscale("log")
    for index, spec in enumerate(specs):
        curves = [metric_series(results[spec, seed][0], "eval_loss") for seed in seeds]
        steps = curves[0][0]
        if any(curve_steps != steps for curve_steps, _ in curves):
            raise ValueError(f"{spec}: the seeds were evaluated at different steps; cannot average their curves.")
        per_step = [values for step, values in zip(steps, zip(*(losses for _, losses in curves))) if step > 0]
        plot_mean_and_spread(ax, index, spec, [step for step in steps if step > 0], per_step)
    baseline = statistics.fmean(baselines.values())
    ax.axhline(baseline, color="gray", linestyle=":", label=f"unigram baseline {baseline:.3f} (mean over seeds)")
    ax.legend(fontsize="small")
    return save_figure(fig, path)


def run_facts(run, args, num_runs, train_minutes, rebuilt_by):
    """The machine, wall time and load of the session that trained the runs (`run`, its record), and the training
    loops' time; `rebuilt_by`: how this summary was made without training (None when this session trained)."""
    parallel = run["parallel"] if run else args.parallel
    loops = (
        f"the {num_runs} runs' training loops took {train_minutes:.1f} min together (`train_runtime`, "
        f"{parallel} at a time, one thread each)"
    )
    if run is None:
        return f"Summary rebuilt {rebuilt_by} on {describe_machine()}; the training run left no {RUN_RECORD}; {loops}."
    rebuilt = f" This summary was rebuilt {rebuilt_by} on {describe_machine()}." if rebuilt_by else ""
    counts = run.get("runs")  # absent from the records of versions that always trained every run
    if counts and (counts["reused"] or counts["resumed"]):
        session = f"The session recorded here trained {counts['trained']} of the {num_runs} runs"
        if counts["resumed"]:
            session += f" ({counts['resumed']} resumed from a checkpoint: their `train_runtime` counts from the resume)"
        if counts["reused"]:
            session += f" and reused {counts['reused']} finished by an earlier one"
        rebuilt = f" {session}; the wall time and load are its own.{rebuilt}"
    code = f"Code: commit {run['commit']}. " if "commit" in run else ""  # absent from records of older versions
    date = f" Date {run['date']}." if "date" in run else ""
    return (
        f"{code}Machine: {run['machine']}.{date} Wall time {run['wall_seconds'] / 60:.1f} min; {loops}; load average "
        f"(1, 5, 15 min) {load_text(run['load_average_start'], run['load_average_end'])}.{rebuilt}"
    )


def plot_differences(results, specs, seeds, path):
    """Each type's eval loss minus the reference's (the first type) on the same seed and step, mean ± std over seeds:
    the paired view, where the seed-to-seed spread that both share cancels (a linear step axis: the differences
    grow late)."""
    reference = specs[0]
    fig, ax = new_figure(
        f"eval loss − {reference}'s (nats)",
        f"eval loss minus {reference}'s on the same seed, mean ± std over {len(seeds)} seeds",
    )
    ax.axhline(0.0, color="gray", linestyle=":", label=reference)
    for index, spec in enumerate(specs[1:], start=1):
        steps = [step for step in metric_series(results[spec, seeds[0]][0], "eval_loss")[0] if step > 0]
        curves = [
            (dict(zip(*metric_series(results[spec, seed][0], "eval_loss"))),
             dict(zip(*metric_series(results[reference, seed][0], "eval_loss"))))
            for seed in seeds
        ]  # fmt: skip
        per_step = [[mine[step] - theirs[step] for mine, theirs in curves] for step in steps]
        plot_mean_and_spread(ax, index, spec, steps, per_step)
    ax.legend(fontsize="small")
    return save_figure(fig, path)


def main(argv=None):
    run_command(run_study, argv)


def run_study(argv):
    args, run_args, model_args, data_args, training_args = parse_command_line(argv)
    summary_dir = Path(args.summary_dir or training_args.output_dir)
    run_record_path = Path(training_args.output_dir) / RUN_RECORD
    stopwatch = Stopwatch()
    results, counts = run_all(args, run_args, model_args, data_args, training_args)
    summary_dir.mkdir(parents=True, exist_ok=True)
    rebuilt_by = "with --summarize_only" if args.summarize_only else None
    if not args.summarize_only and not counts["trained"]:
        rebuilt_by = "by a rerun that found every run finished"
    if rebuilt_by:  # the facts of the session that trained them, where it recorded them
        run = read_run_record(run_record_path)
    else:
        run = {
            **stopwatch.facts(shlex.join(["python", "benchmarks/convergence.py", *argv])),
            "parallel": args.parallel,
            "runs": counts,
        }
        write_atomically(run_record_path, lambda file: json.dump(run, file, indent=2))

    reference = args.types[0]
    check_eval_steps(results, args.types, args.seeds)
    if args.target_eval_loss is not None:
        targets = dict.fromkeys(args.seeds, args.target_eval_loss)
        target_source = "--target_eval_loss"
    else:
        targets = {seed: final_eval_loss(results[reference, seed][0]) for seed in args.seeds}
        target_source = f"{reference}'s final eval loss on the same seed (the held-out blocks differ between seeds)"
    baselines = {seed: results[reference, seed][1]["unigram"]["loss"] for seed in args.seeds}
    rows = summarize(results, args.types, args.seeds, targets, args.plateau_margin)
    absolute, paired = markdown_tables(rows, len(args.seeds))
    late = late_plateau_exits(rows, args.seeds, training_args.max_steps)
    late_text = (
        f"Runs that leave the plateau with less than {LATE_EXIT_SHARE:.0%} of their {training_args.max_steps} steps to "
        f"go, or never (their final loss is read on the plateau or just past it): {', '.join(late)}."
        if late
        else f"Every run leaves the plateau with at least {LATE_EXIT_SHARE:.0%} of its steps to go."
    )
    command = run["command"] if run else shlex.join(["python", "benchmarks/convergence.py", *argv])
    train_minutes = sum(e["train_runtime"] for h, _ in results.values() for e in h if "train_runtime" in e) / 60
    report = "\n\n".join(
        [
            "# Convergence",
            f"Command: `{command}`",
            run_facts(run, args, len(results), train_minutes, rebuilt_by),
            f"Seeds {args.seeds} (each: initialisation, held-out blocks, data order and masks, the same for every "
            f"type); size `{model_args.size}`, {training_args.max_steps} steps, eval every {training_args.eval_steps} "
            f"steps. Unigram baseline (training-token frequencies) on the held-out masked tokens: "
            + ", ".join(f"seed {seed}: {loss:.4f}" for seed, loss in baselines.items())
            + f". Plateau exit: where the eval loss first falls {args.plateau_margin} nats below it. Target: "
            f"{target_source}: " + ", ".join(f"seed {seed}: {target:.4f}" for seed, target in targets.items()) + ".",
            "Mean ± std over seeds (a step metric over the seeds that reach it):",
            absolute,
            late_text,
            "Steps are interpolated linearly between the two evaluations around each crossing. "
            f"Paired against `{reference}` on the same seeds: mean difference (type − {reference}) [95% confidence "
            "interval, Student's t over the per-seed differences], p-value of a two-sided paired t-test. A step "
            "metric is paired over the seeds where both reach it. The p-values are not corrected for the number of "
            f"comparisons: of these {(len(args.types) - 1) * len(METRICS)}, about one in twenty falls below 0.05 by "
            "chance alone when there is no effect.",
            paired,
            "![eval loss](convergence.png)",
            f"![eval loss minus {reference}'s](convergence-difference.png)",
        ]
    )
    write_atomically(summary_dir / "convergence.md", lambda file: file.write(report + "\n"))
    record = {
        "command": command,
        "run": run,
        "summarized_on": describe_machine(),
        "train_minutes": train_minutes,
        "plateau_margin": args.plateau_margin,
        "unigram_baseline": baselines,
        "target_eval_loss": targets,
        "target_source": target_source,
        "seeds": args.seeds,
        "summary": rows,
        "late_plateau_exits": late,
        "eval_loss_curves": {
            f"{spec} seed {seed}": dict(zip(*metric_series(history, "eval_loss")))
            for (spec, seed), (history, _) in results.items()
        },
    }
    write_atomically(summary_dir / "convergence.json", lambda file: json.dump(record, file, indent=2))
    plot_curves(results, args.types, args.seeds, baselines, summary_dir / "convergence.png")
    plot_differences(results, args.types, args.seeds, summary_dir / "convergence-difference.png")
    print(f"\n{absolute}\n\n{paired}\n\nResults in {summary_dir}/convergence.*")


if __name__ == "__main__":
    main()
