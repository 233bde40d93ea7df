"""Pre-training: recipes, data pipeline, weight decay, resume after SIGKILL, 2-process DDP, comparison mode."""

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest
import torch
import transformers
from datasets import Dataset
from scipy.stats import binom
from transformers import AutoTokenizer, DataCollatorForLanguageModeling
from transformers.testing_utils import CaptureLogger

from helpers.assertions import file_names
from helpers.corpora import CORPUS_WORDS, run_args
from helpers.models import EXPECTED
from helpers.runs import LAUNCHERS, assert_same_training, eval_losses
from helpers.tiny import tiny_config
from symbert import ATTENTION_TYPES, SymBertForMaskedLM
from symbert.loading_symbert import BUNDLE_FILES
from symbert.training.arguments import DataArguments, model_config, parse_arguments
from symbert.training.checkpoint_checks import checkpoint_problem
from symbert.training.data import corpus_files
from symbert.training.data import loading as data
from symbert.training.data.masking import ResumableMLMCollator, cap_predictions
from symbert.training.pretrain import SymBertPretrainingTrainer, main, run
from symbert.training.reporting import comparison_report, comparison_table
from symbert.training.run_folder import STAGING_DIR


def run_cli(args, *, launcher=(), kill_after_save_at=None, timeout=300):
    """Run the pre-training entry point in a fresh process, optionally SIGKILLing it right after a checkpoint."""
    driver = textwrap.dedent(
        f"""
        import os, signal, sys
        from transformers import TrainerCallback
        from symbert.training import pretrain

        class KillAfterSave(TrainerCallback):
            def on_save(self, args, state, control, **kwargs):
                if state.global_step == {kill_after_save_at}:
                    os.kill(os.getpid(), signal.SIGKILL)

        original_init = pretrain.SymBertPretrainingTrainer.__init__
        def init_with_killer(self, *args, **kwargs):
            original_init(self, *args, **kwargs)
            self.add_callback(KillAfterSave())
        pretrain.SymBertPretrainingTrainer.__init__ = init_with_killer
        pretrain.main(sys.argv[1:])
        """
    )
    script = ["-c", driver] if not launcher else ["-m", "symbert.training.pretrain"]
    return subprocess.run(
        [sys.executable, *launcher, *script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )


def test_paper_recipe_is_the_papers_protocol(tmp_path):
    run_arguments, model_args, data_args, args = parse_arguments(
        ["--recipe", "paper-base", "--output_dir", str(tmp_path)]
    )
    assert (run_arguments.recipe, run_arguments.global_batch_size, run_arguments.precision) == (
        "paper-base",
        256,
        "auto",
    )
    assert model_args.size == "base" and data_args.tokenizer == "bert-base-uncased"
    assert (data_args.mlm_probability, data_args.max_seq_length, data_args.eval_blocks) == (0.15, 512, 10_000)
    assert args.max_steps == 200_000 and args.learning_rate == 1e-4 and args.warmup_steps == 10_000
    assert args.lr_scheduler_type == "linear" and args.weight_decay == 0.01
    assert (args.adam_beta1, args.adam_beta2, args.adam_epsilon) == (0.9, 0.999, 1e-12)
    assert (args.eval_steps, args.save_steps) == (250, 1000)
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size == 256
    assert not args.bf16 and not args.fp16  # no GPU here; bf16/fp16 is chosen on GPU


def test_command_line_overrides_recipe(tmp_path):
    args = parse_arguments(
        [
            "--recipe",
            "paper-small",
            "--output_dir",
            str(tmp_path),
            "--per_device_train_batch_size",
            "64",
            "--learning_rate",
            "3e-4",
        ]
    )[3]
    assert args.learning_rate == 3e-4 and args.gradient_accumulation_steps == 4  # 256 / 64


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--attention_type", "linear"], "attention type 'linear' is not supported; allowed: original"),
        (["--compare", "original,cosine"], "attention type 'cosine' is not supported"),
        (["--size", "huge"], "size 'huge' is not a preset"),
        (["--per_device_train_batch_size", "24"], "global_batch_size=256 is not a multiple of per-device batch 24"),
        (["--precision", "fp8"], "precision 'fp8' is not supported"),
        (
            ["--compare", "original,symmetric,original"],
            "compare='original,symmetric,original' names 'original' more than once",
        ),
        (["--compare", "original,,symmetric"], "compare='original,,symmetric' has an empty entry"),
        (["--summarize_only", "true"], "summarize_only=True rebuilds a comparison's summary; give the types compared"),
        (
            ["--compare", "original,symmetric", "--summarize_only", "true", "--overwrite_output_dir", "true"],
            "summarize_only=True trains nothing but overwrite_output_dir=True trains every type again",
        ),
    ],
)
def test_bad_arguments_are_named(tmp_path, extra, message):
    with pytest.raises(ValueError, match=message):
        parse_arguments(["--recipe", "paper-small", "--output_dir", str(tmp_path), *extra])


def test_unknown_recipe(tmp_path):
    with pytest.raises(ValueError, match="Unknown recipe 'paper-huge'.*cpu-demo, paper-base, paper-small"):
        parse_arguments(["--recipe", "paper-huge", "--output_dir", str(tmp_path)])


@pytest.mark.parametrize(
    "attention_type, excluded",
    [("shared", {"scale_q", "scale_k", "scale_v"}), ("mhe_mul", {"head_embeddings"}), ("mhe_add", set())],
)
def test_no_weight_decay_on_biases_norms_and_gains(attention_type, excluded):
    model = SymBertForMaskedLM(tiny_config(attention_type))
    trainer = SymBertPretrainingTrainer.__new__(SymBertPretrainingTrainer)  # the method reads no Trainer state
    decayed = trainer.get_decay_parameter_names(model)
    names = {name for name, _ in model.named_parameters()}
    assert not any(n.endswith("bias") or "LayerNorm" in n for n in decayed)
    assert {n.split(".")[-1] for n in names - set(decayed)} >= excluded
    assert not any(n.split(".")[-1] in excluded for n in decayed)
    assert "bert.encoder.layer.0.attention.output.dense.weight" in decayed
    if attention_type == "mhe_add":
        assert "bert.encoder.layer.0.attention.self.head_embeddings" in decayed


def test_blocks_concatenate_texts_and_hold_out_eval(corpus, tmp_path):
    tokenizer = data.load_tokenizer(parse_arguments(run_args(corpus, tmp_path))[2])
    texts = (corpus / "train.txt").read_text().splitlines()
    total = sum(len(ids) for ids in tokenizer(texts)["input_ids"])
    for name, write in {
        "corpus.txt": lambda p: p.write_text("\n".join(texts)),
        "corpus.jsonl": lambda p: p.write_text("\n".join(json.dumps({"body": t}) for t in texts)),
        "corpus.parquet": lambda p: Dataset.from_dict({"body": texts}).to_parquet(str(p)),
    }.items():
        path = tmp_path / name
        write(path)
        column = "text" if name.endswith(".txt") else "body"
        data_args = parse_arguments(run_args(corpus, tmp_path, "--train_files", str(path), "--text_column", column))[2]
        train, held_out = data.load_blocks(data_args, tokenizer)
        assert len(held_out) == 8 and len(train) + len(held_out) == total // 32, name
        assert all(len(ids) == 32 for ids in train["input_ids"])
        assert not set(map(tuple, held_out["input_ids"])) & set(map(tuple, train["input_ids"]))


def test_masking_is_berts_and_seeded_by_content(corpus):
    tokenizer = data.load_tokenizer(parse_arguments(run_args(corpus, "unused"))[2])
    collator = ResumableMLMCollator(tokenizer, mlm_probability=0.15, mask_seed=1)
    generator = torch.Generator().manual_seed(0)
    blocks = [{"input_ids": ids.tolist()} for ids in torch.randint(5, len(tokenizer), (64, 128), generator=generator)]
    batch = collator(blocks)
    again = collator(blocks)
    assert torch.equal(batch["input_ids"], again["input_ids"]) and torch.equal(batch["labels"], again["labels"])
    other_seed = ResumableMLMCollator(tokenizer, mlm_probability=0.15, mask_seed=2)(blocks)
    assert not torch.equal(other_seed["labels"], batch["labels"])

    original = torch.tensor([b["input_ids"] for b in blocks])
    masked = batch["labels"] != -100
    assert torch.equal(batch["labels"][masked], original[masked])
    assert abs(masked.float().mean().item() - 0.15) < 0.01
    replaced_by_mask = (batch["input_ids"] == tokenizer.mask_token_id) & masked
    unchanged = (batch["input_ids"] == original) & masked
    assert abs(replaced_by_mask.sum().item() / masked.sum().item() - 0.8) < 0.03
    assert abs(unchanged.sum().item() / masked.sum().item() - 0.1) < 0.03  # (plus random picks of the same id)
    assert torch.equal(batch["input_ids"][~masked], original[~masked])


def test_block_collation_equals_the_tokenizers_padding_and_special_token_mask(corpus):
    """Blocks of one length are collated without tokenizer.pad and get_special_tokens_mask: the same batch as
    DataCollatorForLanguageModeling's own collation, masks included, for blocks with special tokens in them."""
    tokenizer = data.load_tokenizer(parse_arguments(run_args(corpus, "unused"))[2])
    collator = ResumableMLMCollator(tokenizer, mlm_probability=0.3, mask_seed=7)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, len(tokenizer), (16, 32), generator=generator)  # special ids (0-4) among them
    blocks = [{"input_ids": row.tolist()} for row in ids]
    fast = collator(blocks)
    collator.torch_call = lambda examples: DataCollatorForLanguageModeling.torch_call(collator, examples)
    collator.generator = torch.Generator().manual_seed(fast_generator_seed(blocks, 7))
    slow = DataCollatorForLanguageModeling.torch_call(collator, blocks)
    assert fast.keys() == slow.keys() == {"input_ids", "attention_mask", "labels"}
    for name in fast:
        assert fast[name].dtype == slow[name].dtype and torch.equal(fast[name], slow[name]), name
    assert (fast["labels"][ids < 5] == -100).all()  # special tokens are never masked


def fast_generator_seed(blocks, mask_seed):
    import hashlib

    import numpy as np

    ids = np.asarray([block["input_ids"] for block in blocks], dtype=np.int64)
    digest = hashlib.blake2b(ids.tobytes(), digest_size=8, key=mask_seed.to_bytes(8, "little")).digest()
    return int.from_bytes(digest, "little") >> 1


def test_masking_cap_unmasks_random_extras_and_leaves_batches_within_it_alone(corpus):
    tokenizer = data.load_tokenizer(parse_arguments(run_args(corpus, "unused"))[2])
    generator = torch.Generator().manual_seed(0)
    blocks = [{"input_ids": ids.tolist()} for ids in torch.randint(5, len(tokenizer), (64, 128), generator=generator)]
    original = torch.tensor([b["input_ids"] for b in blocks])

    def collate(cap):
        return ResumableMLMCollator(tokenizer, mlm_probability=0.15, mask_seed=1, max_predictions_per_seq=cap)(blocks)

    uncapped = collate(None)
    masked = uncapped["labels"] != -100
    within = collate(math.ceil(masked.sum().item() / 64))  # a cap the batch reaches at most: bit-identical
    assert torch.equal(within["input_ids"], uncapped["input_ids"]) and torch.equal(within["labels"], uncapped["labels"])

    capped = collate(10)  # 640 of the batch's ~1,230 masked positions
    kept = capped["labels"] != -100
    assert kept.sum().item() == 64 * 10 and not (kept & ~masked).any()
    unmasked = masked & ~kept
    assert torch.equal(capped["input_ids"][unmasked], original[unmasked])  # their own ids, not [MASK] or random ones
    assert torch.equal(capped["input_ids"][kept], uncapped["input_ids"][kept])
    assert torch.equal(capped["labels"][kept], uncapped["labels"][kept])
    assert torch.equal(capped["input_ids"][~masked], original[~masked])
    assert unmasked.any(dim=1).sum() > 48  # a random subset, from (nearly) every block, not the last positions
    again = collate(10)  # drawn from the batch's own seeded generator: the same after a resume
    assert torch.equal(again["input_ids"], capped["input_ids"]) and torch.equal(again["labels"], capped["labels"])


def test_masking_cap_draws_nothing_at_the_cap():
    batch = {"input_ids": torch.tensor([[5, 4, 7, 4]]), "labels": torch.tensor([[-100, 6, -100, 8]])}
    generator = torch.Generator().manual_seed(3)
    state = generator.get_state()
    cap_predictions(batch, 2, generator)
    assert torch.equal(batch["labels"], torch.tensor([[-100, 6, -100, 8]])) and torch.equal(
        generator.get_state(), state
    )
    cap_predictions(batch, 1, generator)
    assert (batch["labels"] != -100).sum() == 1
    assert batch["input_ids"].tolist() in ([[5, 6, 7, 4]], [[5, 4, 7, 8]])  # the unmasked one holds its label's id


class BertSizedTokenizer:
    """What model_config reads of bert-base-uncased, the paper recipes' tokenizer, without downloading it."""

    pad_token_id = 0

    def __len__(self):
        return 30522


@pytest.mark.parametrize("recipe", ["paper-small", "paper-base"])
def test_paper_recipes_compile_with_static_shapes_and_keep_the_papers_parameter_counts(tmp_path, recipe):
    _, model_args, data_args, args = parse_arguments(["--recipe", recipe, "--output_dir", str(tmp_path)])
    assert args.torch_compile and model_args.pad_vocab_to_multiple_of is None
    config = model_config(model_args, BertSizedTokenizer())
    assert config.sparse_prediction and config.max_predictions_per_seq == 88 and config.vocab_size == 30522
    # a batch goes over its cap (the collator then unmasks the extra) far in the binomial tail
    blocks = args.per_device_train_batch_size
    cap, positions = blocks * config.max_predictions_per_seq, blocks * data_args.max_seq_length
    assert binom.sf(cap, positions, data_args.mlm_probability) < 1e-12
    for kind in ATTENTION_TYPES:
        with torch.device("meta"):
            model = SymBertForMaskedLM(model_config(replace(model_args, attention_type=kind), BertSizedTokenizer()))
        assert model.num_parameters() == EXPECTED[model_args.size, kind]  # the paper's Table 2 (and its extension)


def test_data_errors_are_clear(corpus, tmp_path):
    tokenizer = data.load_tokenizer(parse_arguments(run_args(corpus, tmp_path))[2])
    data_args = parse_arguments(run_args(corpus, tmp_path, "--text_column", "body"))[2]
    with pytest.raises(ValueError, match=r"text_column 'body' is not in the dataset; its columns are \['text'\]"):
        data.load_blocks(data_args, tokenizer)
    data_args = parse_arguments(run_args(corpus, tmp_path, "--eval_blocks", "100000"))[2]
    with pytest.raises(ValueError, match="not more than eval_blocks=100000"):
        data.load_blocks(data_args, tokenizer)
    data_args = parse_arguments(run_args(corpus, tmp_path, "--train_files", str(tmp_path / "nope.txt")))[2]
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        data.load_blocks(data_args, tokenizer)


@pytest.mark.slow
def test_resume_after_sigkill_matches_an_uninterrupted_run(corpus, tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert run_cli(run_args(corpus, straight)).returncode == 0
    killed = run_cli(run_args(corpus, resumed), kill_after_save_at=4)
    assert killed.returncode == -9 and (resumed / "checkpoint-4").is_dir() and not (resumed / "checkpoint-8").exists()
    finished = run_cli(run_args(corpus, resumed))  # resumes from the newest checkpoint by itself
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert "Resuming from" in finished.stdout and "checkpoint-4" in finished.stdout

    assert_same_training(resumed, straight)


@pytest.mark.slow
@pytest.mark.xdist_group("several_processes")  # .ci/run: one at a time beside the other slow tests
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_two_process_ddp(corpus, tmp_path, launcher):
    output_dir = tmp_path / "ddp"
    args = run_args(corpus, output_dir, "--global_batch_size", "16", "--logging_steps", "1", "--learning_rate", "3e-3")
    result = run_cli(args, launcher=LAUNCHERS[launcher])
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((output_dir / "training_summary.json").read_text())
    assert summary["world_size"] == 2 and summary["gradient_accumulation_steps"] == 2
    assert summary["global_batch_size"] == 4 * 2 * 2 == 16
    losses = [
        e["loss"] for e in json.loads((output_dir / "trainer_state.json").read_text())["log_history"] if "loss" in e
    ]
    assert len(losses) == 8 and losses[-1] < losses[0]
    assert result.stdout.count("Results in") == 1  # printed, like every file, by rank 0 only
    checkpoint = output_dir / "checkpoint-8"  # renamed into place once both processes wrote their RNG state
    assert checkpoint_problem(checkpoint) is None and (checkpoint / "rng_state_1.pth").is_file()
    assert not (output_dir / STAGING_DIR).exists()
    assert file_names(p.name for p in output_dir.iterdir() if p.is_file()) == sorted(
        [
            "config.json",
            *BUNDLE_FILES,
            "loss.png",
            "metrics.csv",
            "metrics.json",
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
            "trainer_state.json",
            "training_args.bin",
            "training_summary.json",
            ".pretrain.lock",
        ]
    )


def test_the_comparison_names_its_seed_steps_target_and_noise():
    """comparison.md says what a reader needs to weigh it: the seed, each run's steps, the target and its source,
    and that one seed per type cannot tell a difference from seed noise (pointing at the multi-seed study)."""
    runs = {
        "original": [
            {"eval_loss": 3.0, "step": 10},
            {"eval_loss": 2.51234, "step": 20},
            {"train_runtime": 1.0, "step": 20},
        ],
        "symmetric": [{"eval_loss": 2.8, "step": 10}, {"eval_loss": 2.4, "step": 20}, {"loss": 2.5, "step": 25}],
    }
    report = comparison_report(runs, 2.51234, target_given=False, seed=7, data_seed=42)
    assert "One run per type, each with seed 7 (data order from data seed 42): the same seed for every type." in report
    assert "Training steps: `original` 20, `symmetric` 25." in report  # each run's last step
    assert "Target eval loss: 2.5123, the first run's (`original`) final eval loss." in report
    assert comparison_table(runs, 2.51234) in report  # the table and its columns as they were
    assert "| symmetric | 2.4000 | 2.4000 | 20 |" in report and "| original | 2.5123 | 2.5123 | 20 |" in report
    assert "one seed per type, so the seed-to-seed spread is not measured here and no difference in this table can be " \
        "told apart from seed noise" in " ".join(report.split())  # fmt: skip
    assert "`python benchmarks/convergence.py --types original,symmetric --seeds 1,2,3,4,5 -- ARGS`" in report
    given = comparison_report(runs, 2.45, target_given=True, seed=7)
    assert (
        "each with seed 7: the same seed" in given and "Target eval loss: 2.4500, given by --target_eval_loss." in given
    )
    assert "| symmetric | 2.4000 | 2.4000 | 20 |" in given and "| original | 2.5123 | 2.5123 | not reached |" in given


@pytest.mark.heavy
def test_comparison_mode(corpus, tmp_path, capsys):
    main(run_args(corpus, tmp_path, "--compare", "original,symmetric", "--max_steps", "4", "--save_steps", "100"))
    table = (tmp_path / "comparison.md").read_text()
    assert "original" in table and "symmetric" in table
    # the seed and steps each run recorded, the target taken from original's final eval loss, and the noise note
    summaries = {
        kind: json.loads((tmp_path / kind / "training_summary.json").read_text()) for kind in ("original", "symmetric")
    }
    seed = summaries["original"]["training_arguments"]["seed"]
    assert f"each with seed {seed} (data order from data seed 42): the same seed for every type" in table
    assert "Training steps: `original` 4, `symmetric` 4." in table
    assert [summary["steps"] for summary in summaries.values()] == [4, 4]
    target = eval_losses(tmp_path / "original")[-1][1]
    assert f"Target eval loss: {target:.4f}, the first run's (`original`) final eval loss." in table
    assert f"| original | {target:.4f} |" in table and "no difference in this table can be told apart" in table
    assert (tmp_path / "comparison.png").stat().st_size > 1000
    for kind in ("original", "symmetric"):
        assert json.loads((tmp_path / kind / "config.json").read_text())["attention_type"] == kind
        assert eval_losses(tmp_path / kind)[-1][0] == 4
        # tokenised once: every type trained on the blocks prepared in OUTPUT_DIR/blocks
        summary = json.loads((tmp_path / kind / "training_summary.json").read_text())
        assert summary["data_arguments"]["blocks_dir"] == str(tmp_path / "blocks")
    assert (tmp_path / "blocks" / "manifest.json").is_file()
    out = capsys.readouterr().out
    assert "Comparison in" in out and out.count("training blocks once") == 1


@pytest.mark.heavy
def test_a_copied_or_moved_comparison_is_summarised_from_its_own_files(corpus, tmp_path, capsys):
    """The runs of a comparison record absolute paths into its folder (the blocks prepared in it). Copied (cp -r) or
    moved elsewhere, the folder is summarised (--summarize_only) or run again from its own files: after the original
    is gone, and while a changed original (trained again with other steps) sits at the recorded paths, it gives its
    own figures, trains nothing and leaves the original's files as they are."""
    original, copy, moved = tmp_path / "comparison", tmp_path / "copy", tmp_path / "moved"

    def compare(folder, *extra):
        main(
            run_args(
                corpus, folder, "--compare", "original,symmetric", "--max_steps", "4", "--save_steps", "100", *extra
            )
        )
        return capsys.readouterr().out

    def figures(folder):
        return {
            kind: json.loads((folder / kind / "training_summary.json").read_text())["final_eval_loss"]
            for kind in ("original", "symmetric")
        }

    compare(original)
    expected, table = figures(original), (original / "comparison.md").read_text()
    assert json.loads((original / "original" / "training_summary.json").read_text())["data_arguments"][
        "blocks_dir"
    ] == str(original / "blocks")
    shutil.copytree(original, copy)  # cp -r
    original.rename(moved)  # mv: nothing is left at the recorded paths

    def summarised_from_own_files(folder, *extra):
        (folder / "comparison.md").unlink()
        out = compare(folder, *extra)
        assert ": final eval loss" not in out  # nothing trained, every type read back
        assert ("already trained" in out) == ("--summarize_only" not in extra)
        assert str(original) not in out and f"Comparison in {folder}/comparison.md" in out
        assert figures(folder) == expected and (folder / "comparison.md").read_text() == table

    summarised_from_own_files(copy, "--summarize_only", "true")
    summarised_from_own_files(moved)

    compare(original, "--max_steps", "2")  # another comparison where the copied one recorded its paths
    changed = {path: path.read_bytes() for path in original.rglob("*") if path.is_file()}
    assert "Training steps: `original` 2, `symmetric` 2." in (original / "comparison.md").read_text()
    for folder in (copy, moved):
        summarised_from_own_files(folder, "--summarize_only", "true")
        summarised_from_own_files(folder)
        assert "Training steps: `original` 4, `symmetric` 4." in (folder / "comparison.md").read_text()
    assert {path: path.read_bytes() for path in original.rglob("*") if path.is_file()} == changed

    (copy / "symmetric" / "training_summary.json").unlink()  # an unfinished type is not summarised
    with pytest.raises(ValueError, match=rf"summarize_only=True: {copy / 'symmetric'} holds no finished run"):
        run(run_args(corpus, copy, "--compare", "original,symmetric", "--max_steps", "4", "--summarize_only", "true"))


class Interrupted(Exception):
    pass


@pytest.mark.heavy
def test_an_interrupted_comparison_resumes_and_reuses_the_finished_types(corpus, tmp_path, capsys, monkeypatch):
    """Run again, a comparison stopped while training its second type keeps the first (its folder holds
    training_summary.json: not trained again, its results reused), resumes the second and trains the third;
    --overwrite_output_dir true trains every type again."""
    args = run_args(corpus, tmp_path, "--compare", "original,symmetric,pairwise")
    original_save = SymBertPretrainingTrainer._save_checkpoint

    def save_then_stop_in_symmetric(self, model, trial):
        original_save(self, model, trial)
        if self.args.output_dir.endswith("symmetric") and self.state.global_step == 4:
            raise Interrupted

    with monkeypatch.context() as patch:
        patch.setattr(SymBertPretrainingTrainer, "_save_checkpoint", save_then_stop_in_symmetric)
        with pytest.raises(Interrupted):
            main(args)
    assert (tmp_path / "original" / "training_summary.json").is_file()
    assert (tmp_path / "symmetric" / "checkpoint-4").is_dir() and not (tmp_path / "pairwise").exists()
    finished = {path: path.read_bytes() for path in (tmp_path / "original").rglob("*") if path.is_file()}
    capsys.readouterr()

    main(args)
    out = capsys.readouterr().out
    assert f"original: already trained in {tmp_path / 'original'} (it holds training_summary.json)" in out
    assert f"Resuming from {tmp_path / 'symmetric' / 'checkpoint-4'}" in out and "pairwise: final eval loss" in out
    assert "original: final eval loss" not in out
    assert {path: path.read_bytes() for path in finished} == finished  # reused as it was
    table = (tmp_path / "comparison.md").read_text()
    for kind in ("original", "symmetric", "pairwise"):
        final_loss = json.loads((tmp_path / kind / "training_summary.json").read_text())["final_eval_loss"]
        assert f"| {kind} | {final_loss:.4f} |" in table

    with pytest.raises(
        ValueError,
        match=r"original holds a finished run of other settings than this comparison: "
        r"max_steps is 8 there but 6 here",
    ):
        run([*args, "--max_steps", "6"])

    main([*args, "--overwrite_output_dir", "true", "--max_steps", "4"])  # trains every type again
    out = capsys.readouterr().out
    assert "already trained" not in out and "Resuming" not in out
    for kind in ("original", "symmetric", "pairwise"):
        assert json.loads((tmp_path / kind / "training_summary.json").read_text())["steps"] == 4
        assert f"{kind}: final eval loss" in out


def test_embedded_corpus_ships_with_its_provenance(tmp_path):
    data_args = parse_arguments(["--recipe", "cpu-demo", "--output_dir", str(tmp_path)])[2]
    assert corpus_files.uses_embedded_corpus(data_args)
    texts = corpus_files.load_texts(data_args)
    assert len(texts) == 15_143 and texts.column_names == ["text"]
    assert corpus_files.EMBEDDED_CORPUS.stat().st_size <= 5 * 2**20
    assert "public domain" in (corpus_files.EMBEDDED_CORPUS.parent / "SOURCE.md").read_text().lower()


@pytest.mark.heavy
def test_streaming_local_files(corpus, tmp_path):
    data_args = parse_arguments(run_args(corpus, tmp_path, "--streaming", "true"))[2]
    tokenizer = data.load_tokenizer(data_args)
    train, held_out = data.load_blocks(data_args, tokenizer)
    held_out_blocks = [tuple(b["input_ids"]) for b in held_out]
    train_blocks = [tuple(b["input_ids"]) for b in train]
    lines = (corpus / "train.txt").read_text().splitlines()
    tokens = tokenizer(lines)["input_ids"]
    held_out_lines = next(n for n in range(len(lines)) if sum(map(len, tokens[: n + 1])) > 8 * 32) + 1
    assert sum(map(len, tokens[: held_out_lines - 1])) < 8 * 32 <= sum(map(len, tokens[:held_out_lines]))
    # training blocks: the other texts, blocked as the held-out ones were (one batch of texts, its tail dropped)
    rest = sum(map(len, tokens[held_out_lines:]))
    assert len(held_out_blocks) == 8 and len(train_blocks) == rest // 32
    assert {len(b) for b in train_blocks + held_out_blocks} == {32}
    assert not set(held_out_blocks) & set(train_blocks)

    output_dir = tmp_path / "run"
    main(run_args(corpus, output_dir, "--streaming", "true", "--save_steps", "100"))
    losses = eval_losses(output_dir)
    assert [step for step, _ in losses] == [4, 8] and losses[-1][1] < 6.0  # ln(200) = 5.3 is chance on 200 tokens
    assert (output_dir / "model.safetensors").is_file()


def contents(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else None


@pytest.mark.parametrize(
    "case, extra, error, message",
    [
        ("empty corpus", [], ValueError, "empty.txt holds only blank lines"),
        ("missing column", ["--text_column", "body"], ValueError, r"text_column 'body' is not in the dataset"),
        ("missing file", ["--train_files", "nope.txt"], FileNotFoundError, "train_files not found: nope.txt"),
        (
            "vocab mismatch",
            ["--config_overrides", '{"vocab_size": 1000}'],
            ValueError,
            "The tokenizer has [0-9]+ tokens but the model's vocab_size is 1000",
        ),
        (
            "too long",
            ["--max_seq_length", "1024"],
            ValueError,
            "max_seq_length=1024 is above the model's max_position_embeddings=512",
        ),
        ("bad overrides", ["--config_overrides", "{hidden_size: 64}"], ValueError, "is not a JSON object"),
        ("finished run", [], ValueError, "already holds a finished run; pass --overwrite_output_dir true"),
    ],
)
def test_bad_input_stops_before_training_and_writes_nothing(corpus, tmp_path, case, extra, error, message):
    output_dir = tmp_path / "run"
    if case == "empty corpus":
        (tmp_path / "empty.txt").write_text("\n  \n\n")
        extra = ["--train_files", str(tmp_path / "empty.txt")]
    if case == "finished run":
        output_dir.mkdir()
        (output_dir / "training_summary.json").write_text("{}")
        (output_dir / "checkpoint-4").mkdir()
    before = contents(output_dir)
    with pytest.raises(error, match=message):
        run(run_args(corpus, output_dir, *extra))  # main() turns user errors into exit status 2
    assert contents(output_dir) == before


@pytest.mark.heavy
def test_overwrite_and_resume_checks(corpus, tmp_path):
    output_dir = tmp_path / "run"
    (output_dir / "checkpoint-1000").mkdir(parents=True)
    (output_dir / "training_summary.json").write_text("{}")
    main(run_args(corpus, output_dir, "--overwrite_output_dir", "true", "--max_steps", "4"))
    assert sorted(p.name for p in output_dir.glob("checkpoint-*")) == ["checkpoint-4"]  # the old run's are gone

    other = tmp_path / "other"
    with pytest.raises(
        ValueError,
        match="Cannot resume from .*checkpoint-4: its attention_type is 'original' but this run's is 'pairwise'",
    ):
        run(
            run_args(
                corpus,
                other,
                "--attention_type",
                "pairwise",
                "--resume_from_checkpoint",
                str(output_dir / "checkpoint-4"),
            )
        )
    with pytest.raises(ValueError, match="resume_from_checkpoint='.*nowhere' is not a Trainer checkpoint"):
        run(run_args(corpus, other, "--resume_from_checkpoint", str(tmp_path / "nowhere")))
    assert not other.exists()


def test_a_text_longer_than_the_model_is_blocked_without_a_length_warning(corpus, tmp_path):
    """Texts are cut into blocks, never fed whole: transformers' "sequence length is longer than the specified
    maximum" warning would be noise (the main job printed it for a 550-token paragraph)."""
    long_text = " ".join(CORPUS_WORDS * 40)  # far more than model_max_length tokens
    (tmp_path / "long.txt").write_text(long_text + "\n" + "a short line.\n" * 50)
    tokenizer = AutoTokenizer.from_pretrained(corpus / "tokenizer", model_max_length=64)
    data_args = DataArguments(train_files=[str(tmp_path / "long.txt")], max_seq_length=32, eval_blocks=2)
    with CaptureLogger(transformers.tokenization_utils_base.logger) as captured:
        train, held_out = data.load_blocks(data_args, tokenizer)
    assert len(tokenizer(long_text)["input_ids"]) > 64
    assert len(train) + len(held_out) >= len(tokenizer(long_text)["input_ids"]) // 32
    assert "longer than the specified maximum" not in captured.out
