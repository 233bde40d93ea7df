"""Smoke runs of benchmarks/throughput.py and benchmarks/convergence.py on tiny settings, checked against hand-computed
numbers (FLOP counts, saved-activation memory, steps to a target)."""

import gzip
import hashlib
import io
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch
from scipy import stats
from transformers import AutoTokenizer

from symbert import ATTENTION_TYPES, SymBertConfig
from symbert.attention_symbert import SYMBERT_SELF_ATTENTION_CLASSES

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import ablation  # noqa: E402
import convergence  # noqa: E402
import convergence_factor  # noqa: E402
import score_scale  # noqa: E402
import second_corpus  # noqa: E402
import throughput  # noqa: E402
import throughput_timing  # noqa: E402

from helpers.assertions import assert_one_line  # noqa: E402
from helpers.corpora import run_args, tiny_corpus, tiny_sentences  # noqa: E402
from helpers.tiny import tiny_config  # noqa: E402


def test_training_flops_per_token_by_hand():
    config = tiny_config("original")  # h 128, 2 heads (d 64), FFN 512, 2 layers, vocab 99
    h, d, f, vocab, seq = 128, 64, 512, 99, 16
    per_layer = 3 * h * h + 2 * seq * h + h * h + 2 * h * f
    assert throughput_timing.training_flops_per_token(config, seq) == 6 * (2 * per_layer + h * h + h * vocab)
    savings = {"symmetric": h * h, "pairwise": h * h - 2 * d * d, "shared": 2 * h * h, "mhe_add": 3 * h * h - 3 * h * d}
    for kind, saved_per_layer in savings.items():
        flops = throughput_timing.training_flops_per_token(tiny_config(kind), seq)
        assert flops == 6 * (2 * (per_layer - saved_per_layer) + h * h + h * vocab)


def test_throughput_script_writes_ratios_and_exact_cpu_memory(tmp_path):
    output = tmp_path / "results" / "throughput"
    argv = [
        "--sizes",
        "tiny",
        "--seq_lens",
        "16",
        "--tokens_per_batch",
        "32",
        "--rounds",
        "1",
        "--warmup",
        "0",
        "--vocab_size",
        "99",
        "--matmul_size",
        "128",
        "--types",
        "original",
        "symmetric",
        "mhe_add",
        "--output",
        str(output),
    ]
    throughput.main(argv)
    record = json.loads(output.with_suffix(".json").read_text())
    rows = {row["model"]: row for row in record["rows"]}
    assert list(rows) == ["bert", "original", "symmetric", "mhe_add"]
    assert all((row["mode"], row["head"]) == ("eager", "full") for row in rows.values())
    assert rows["bert"]["train_ratio_bert"] == rows["bert"]["train_ratio_bert_run_mlm"] == 1.0
    assert rows["original"]["train_ratio_original"] == 1.0 and rows["bert"]["batch_size"] == 2
    assert rows["original"]["meets_bert_target"] is not None and rows["symmetric"]["meets_speed_target"] is not None
    assert all(row["train_tokens_per_s"] > 0 and 0 < row["train_mfu"] for row in rows.values())
    # Counted exactly on CPU: BERT and `original` have the same parameters and save the same activations, but for the
    # loss: `original`'s reads only the 4 labelled rows of 32, so it saves 28 rows fewer of log-probabilities (99
    # floats) and targets (an int64), and the 4 rows' int64 indices. BERT under transformers 5 also saves a 16-id
    # token-type tensor that `original`, and 4.x's BERT, take as a view of a buffer.
    loss_rows = 28 * (99 * 4 + 8) - 4 * 8
    assert rows["bert"]["memory_bytes"] - rows["original"]["memory_bytes"] - loss_rows in (0, 16 * 8)
    # symmetric drops `key`: 16 KiB of weights+bias per layer fewer ×4 (weights, grads, 2 Adam moments); exactly that
    # under transformers 4.x, and 128 bytes more under 5.x, whose BERT saves the token-type tensor (above)
    assert rows["symmetric"]["memory_bytes"] <= rows["bert"]["memory_bytes"] - 2 * 4 * 4 * (128 * 128 + 128)
    assert rows["symmetric"]["expected_train_ratio"] > 1.0
    report = output.with_suffix(".md").read_text()
    assert "| tiny | 16 | fp32 | sdpa | eager | full | symmetric |" in report and "Load average" in report
    assert str(output) in record["command"]


def test_sparse_head_flops_by_hand():
    h, f, vocab, seq, predictions = 128, 512, 99, 16, 5
    per_layer = 3 * h * h + 2 * seq * h + h * h + 2 * h * f
    encoder = 6 * 2 * per_layer
    sparse = tiny_config("original", sparse_prediction=True, max_predictions_per_seq=predictions)
    # the head transform (h×h) and the decoder (h×vocab) on 5 of every 16 positions
    assert throughput_timing.training_flops_per_token(sparse, seq) == pytest.approx(
        encoder + 6 * (h * h + h * vocab) * predictions / seq, rel=1e-12
    )
    # more predictions than positions: the model predicts every position, no more
    everything = tiny_config("original", sparse_prediction=True, max_predictions_per_seq=2 * seq)
    assert throughput_timing.training_flops_per_token(everything, seq) == throughput_timing.training_flops_per_token(
        tiny_config("original"), seq
    )
    # the FLOP ratio original / shared on the sparse path: the head's share is smaller, so the saving counts more
    shared = tiny_config("shared", sparse_prediction=True, max_predictions_per_seq=predictions)
    full_ratio = throughput_timing.training_flops_per_token(tiny_config("original"), seq) / (
        throughput_timing.training_flops_per_token(tiny_config("shared"), seq)
    )
    sparse_ratio = throughput_timing.training_flops_per_token(sparse, seq) / throughput_timing.training_flops_per_token(
        shared, seq
    )
    assert (
        sparse_ratio
        == pytest.approx(
            (encoder + 6 * (h * h + h * vocab) * 5 / 16) / (encoder - 12 * 2 * h * h + 6 * (h * h + h * vocab) * 5 / 16)
        )
        and sparse_ratio > full_ratio
    )
    with pytest.raises(ValueError, match="max_predictions_per_seq"):
        throughput_timing.training_flops_per_token(tiny_config("original", sparse_prediction=True), seq)


def test_sparse_head_gives_the_full_heads_loss():
    torch.manual_seed(0)
    model = throughput_timing.SymBertForMaskedLM(tiny_config("shared")).eval()
    seq, predictions = 32, throughput_timing.max_predictions(throughput.parse_command_line(["--seq_lens", "32"]), 32)
    assert predictions == 7  # ceil(0.2 × 32)
    input_ids, labels = throughput_timing.mlm_batch(
        2, seq, 99, torch.device("cpu"), predictions_per_seq=throughput_timing.masked_positions(seq, predictions)
    )
    assert ((labels != -100).sum(dim=1) == 5).all()  # round(0.15 × 32) in every sequence
    sparse = throughput_timing.sparse_head_model(model, predictions)
    assert sparse.cls is model.cls and sparse.bert is model.bert  # one set of weights
    full_output, sparse_output = model(input_ids, labels=labels), sparse(input_ids, labels=labels)
    assert full_output.logits.shape == (2, seq, 99) and sparse_output.logits.shape == (2 * predictions, 99)
    torch.testing.assert_close(sparse_output.loss, full_output.loss, rtol=1e-5, atol=1e-6)
    compiled = torch.compile(sparse, backend="aot_eager", dynamic=False)
    torch.testing.assert_close(compiled(input_ids, labels=labels).loss, full_output.loss, rtol=1e-5, atol=1e-6)


def test_regional_compile_traces_one_layer_and_leaves_the_eager_model_as_it_was():
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = throughput_timing.SymBertForMaskedLM(tiny_config("symmetric")).train()  # 2 layers
    input_ids, labels = throughput_timing.mlm_batch(2, 16, 99, torch.device("cpu"), predictions_per_seq=3)
    eager_loss = model(input_ids, labels=labels).loss
    torch._dynamo.reset()
    before = counters["stats"]["unique_graphs"]
    regional = throughput_timing.compiled(model, "layers", "aot_eager")
    regional_loss = regional(input_ids, labels=labels).loss
    regional_loss.backward()
    assert counters["stats"]["unique_graphs"] - before == 1  # both layers run the one graph
    torch.testing.assert_close(regional_loss, eager_loss)
    # the same weights (their gradients reach the model's), the model's own layers not compiled
    assert all(p.grad is not None for p in model.bert.encoder.layer.parameters())
    assert list(regional.parameters()) == list(model.parameters())
    assert not isinstance(model.bert.encoder.layer[0], torch._dynamo.eval_frame.OptimizedModule)
    assert all(isinstance(layer, torch._dynamo.eval_frame.OptimizedModule) for layer in regional.bert.encoder.layer)
    # the sparse head's path (the same layers) runs the same graph: nothing more to compile
    sparse = throughput_timing.compiled(throughput_timing.sparse_head_model(model, 4), "layers", "aot_eager")
    sparse(input_ids, labels=labels).loss.backward()
    assert counters["stats"]["unique_graphs"] - before == 1
    assert isinstance(throughput_timing.compiled(model, "whole", "aot_eager"), torch._dynamo.eval_frame.OptimizedModule)


@pytest.mark.heavy
def test_throughput_compiled_and_sparse_paths(tmp_path):
    output = tmp_path / "throughput"
    argv = ["--sizes", "tiny", "--tokens_per_batch", "64", "--seq_lens", "32", "--rounds", "1", "--warmup", "1"]
    argv += ["--vocab_size", "99", "--matmul_size", "64", "--types", "shared", "--modes", "compiled", "eager"]
    argv += ["--heads", "sparse", "full", "--compile_backend", "aot_eager", "--output", str(output)]
    throughput.main(argv)
    record = json.loads(output.with_suffix(".json").read_text())
    rows = {(row["model"], row["mode"], row["head"]): row for row in record["rows"]}
    # BERT eager and compiled (full head only), then every type on every path; `original` is always run
    assert list(rows) == [
        ("bert", "eager", "full"),
        ("original", "eager", "full"),
        ("shared", "eager", "full"),
        ("original", "eager", "sparse"),
        ("shared", "eager", "sparse"),
        ("bert", "compiled", "full"),
        ("original", "compiled", "full"),
        ("shared", "compiled", "full"),
        ("original", "compiled", "sparse"),
        ("shared", "compiled", "sparse"),
    ]
    for (name, mode, head), row in rows.items():
        original = rows["bert" if name == "bert" else "original", mode, head]
        bert, run_mlm = rows["bert", mode, "full"], rows["bert", "eager", "full"]
        assert row["train_ratio_bert"] == row["train_tokens_per_s"] / bert["train_tokens_per_s"]
        assert row["train_ratio_bert_run_mlm"] == row["train_tokens_per_s"] / run_mlm["train_tokens_per_s"]
        if name != "bert":
            # paired: original's time where this model ran (between original's two steps of the block) over its own
            if name == "original":  # its own: the mean of its two steps in the block
                assert row["reference_seconds"] == row["train_seconds"]
            rounds = [o / t for o, t in zip(row["reference_seconds"], row["train_seconds"])]
            assert row["train_ratio_original_rounds"] == rounds and len(rounds) == 1
            assert row["train_ratio_original"] == rounds[0]
            assert row["memory_ratio_original"] == row["memory_bytes"] / original["memory_bytes"]
            assert row["expected_train_ratio"] == original["train_flops_per_token"] / row["train_flops_per_token"]
        # compiled: the first (warm-up) steps' wall time, compilation included
        assert (row["compile_seconds"] is not None) == (mode == "compiled") == (row["graphs"] is not None)
        if mode == "compiled":
            assert row["compile_seconds"]["train"] > 0 and row["graph_breaks"] == 0
        assert row["max_predictions_per_seq"] == (7 if head == "sparse" else None)
        assert row["graphs_compiled_while_timed"] == 0
    assert rows["original", "compiled", "full"]["graphs"] == 2  # training and inference, one graph each
    # compiled per layer (the default): the sparse head's training step runs the full head's layer graph
    assert rows["original", "compiled", "sparse"]["graphs"] == 0 and rows["shared", "compiled", "sparse"]["graphs"] == 0
    assert {row["compile_scope"] for row in rows.values()} == {None, "layers"} and record["compile_scope"] == "layers"
    assert rows["shared", "compiled", "sparse"]["inference_timed_on"] == "full"
    assert rows["shared", "eager", "sparse"]["meets_speed_target"] is not None
    assert rows["shared", "eager", "sparse"]["meets_memory_target"] is not None
    assert rows["original", "compiled", "full"]["meets_bert_target"] is not None
    assert rows["original", "compiled", "sparse"]["meets_bert_target"] is None  # BERT has no sparse head
    # the sparse head runs the decoder on 7 of 32 positions: less memory, fewer FLOPs, a larger FLOP saving ratio
    full, sparse = rows["shared", "eager", "full"], rows["shared", "eager", "sparse"]
    assert (
        sparse["memory_bytes"] < full["memory_bytes"] and sparse["expected_train_ratio"] > full["expected_train_ratio"]
    )
    report = output.with_suffix(".md").read_text()
    assert "| tiny | 32 | fp32 | sdpa | compiled | sparse (M 7) | shared |" in report
    assert "vs BERT run_mlm (eager, full head)" in report and "compile s" in report


def test_profile_gives_each_types_ratio_if_only_its_matrix_products_shrank(tmp_path):
    output = tmp_path / "throughput"
    argv = ["--sizes", "tiny", "--seq_lens", "16", "--tokens_per_batch", "64", "--rounds", "1", "--warmup", "0"]
    argv += ["--vocab_size", "99", "--matmul_size", "64", "--types", "original", "shared", "--heads", "sparse"]
    throughput.main(argv + ["--profile", "original,shared", "--output", str(output)])
    report = output.with_suffix(".md").read_text()
    shares = [float(share) for share in re.findall(r"attention kernels\): ([0-9.]+)% of the step", report)]
    assert len(shares) == 3 and all(0 < share < 100 for share in shares)  # BERT, original, shared
    share = float(re.search(r"with p = ([0-9.]+):", report).group(1))
    assert share == pytest.approx(shares[1] / 100, abs=6e-4)
    row = re.search(r"\| shared \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \|", report)
    flops, bound, target = (float(value) for value in row.groups())
    rows = {r["model"]: r for r in json.loads(output.with_suffix(".json").read_text())["rows"]}
    assert flops == pytest.approx(rows["shared"]["expected_train_ratio"], abs=6e-4)  # the sparse path's FLOP ratio
    assert bound == pytest.approx(1 / (share / flops + 1 - share), abs=2e-3) and 1 < bound < flops
    assert target == pytest.approx(flops - 0.02, abs=6e-4)


def test_a_round_brackets_each_path_with_original_and_interpolates_its_time(monkeypatch):
    """original runs first and last in its path's block; each other model is paired with original's time
    interpolated to its place, so a linear drift of the machine's speed leaves the ratios exact."""
    entries = [
        throughput_timing.Entry(name, "eager", "full", None, None, None, None)
        for name in ("bert", "original", "a", "b")
    ]
    entries[3].times_inference = False
    calls = []
    # original's step: 10 s first, 16 s last; between them a (and its inference), b, BERT (and its inference)
    drift = iter([10.0, 3.0, 6.0, 5.0, 12.0, 1.5, 2.0, 16.0])

    def fake_timed(function, steps, device):
        calls.append(function())
        return next(drift)

    monkeypatch.setattr(throughput_timing, "timed", fake_timed)
    throughput_timing.timed_round(entries, 1, lambda e: ("train", e.name), lambda e: ("infer", e.name), 1, None)
    # rotated by the round: a, b, bert (the place decides the interpolation)
    assert calls == [
        ("train", "original"),
        ("train", "a"),
        ("infer", "a"),
        ("train", "b"),
        ("train", "bert"),
        ("infer", "bert"),
        ("infer", "original"),
        ("train", "original"),
    ]
    bert, original, a, b = entries
    assert original.train_seconds == original.reference_seconds == [13.0]
    assert a.train_seconds == [3.0] and a.reference_seconds == [11.5]  # place 1 of 3 between 10 and 16
    assert b.train_seconds == [5.0] and b.reference_seconds == [13.0] and b.inference_seconds == []
    assert bert.train_seconds == [12.0] and bert.reference_seconds == [14.5]
    assert a.inference_seconds == [6.0] and bert.inference_seconds == [1.5] and original.inference_seconds == [2.0]


def fake_history(eval_losses, step=10):
    history = [{"eval_loss": loss, "step": i * step} for i, loss in enumerate(eval_losses)]
    return history + [{"train_runtime": 30.0, "step": (len(eval_losses) - 1) * step}]


def scores(unigram_loss, accuracy):
    return {"unigram": {"loss": unigram_loss, "accuracy": 0.06}, "model": {"loss": 0.0, "accuracy": accuracy}}


def test_convergence_summary_pairs_each_type_with_original_on_the_same_seeds():
    results = {
        ("original", 1): (fake_history([9.0, 6.2, 6.0, 5.0]), scores(6.3, 0.20)),
        ("original", 2): (fake_history([9.0, 6.3, 6.0, 5.5]), scores(6.3, 0.18)),
        ("original", 3): (fake_history([9.0, 6.3, 5.9, 5.4]), scores(6.3, 0.19)),
        ("symmetric", 1): (fake_history([9.0, 6.0, 4.9, 4.8]), scores(6.3, 0.25)),
        ("symmetric", 2): (fake_history([9.0, 6.3, 6.4, 5.6]), scores(6.3, 0.17)),
        ("symmetric", 3): (fake_history([9.0, 6.0, 5.3, 5.2]), scores(6.3, 0.22)),
    }
    targets = {1: 5.0, 2: 5.5, 3: 5.4}
    rows = {
        row["attention_type"]: row
        for row in convergence.summarize(results, ["original", "symmetric"], [1, 2, 3], targets, margin=0.2)
    }
    # plateau exit: where the eval loss falls to 6.3 - 0.2 = 6.1, interpolated between evaluations (every 10 steps)
    assert rows["original"]["plateau_exit"]["per_seed"] == pytest.approx([15, 10 + 20 / 3, 15])
    assert rows["symmetric"]["plateau_exit"]["per_seed"] == pytest.approx([29 / 3, 23.75, 29 / 3])
    exit_difference = rows["symmetric"]["plateau_exit"]["vs_reference"]
    differences = [29 / 3 - 15, 23.75 - 10 - 20 / 3, 29 / 3 - 15]
    assert exit_difference["mean"] == pytest.approx(sum(differences) / 3) and exit_difference["seeds"] == 3
    low, high = exit_difference["ci95"]  # t(0.975, 2) = 4.302653 times the standard error of the differences
    sd = (sum((d - sum(differences) / 3) ** 2 for d in differences) / 2) ** 0.5
    assert high - low == pytest.approx(2 * 4.302653 * sd / 3**0.5, rel=1e-5)
    t = (sum(differences) / 3) / (sd / 3**0.5)
    assert exit_difference["p"] == pytest.approx(2 * stats.t.sf(abs(t), 2))  # two-sided paired t-test
    assert rows["original"]["plateau_exit"]["vs_reference"] is None
    # step to reach original's final loss on the same seed; seed 2 never reaches 5.5
    assert rows["original"]["step_to_target"]["per_seed"] == pytest.approx([30, 30, 30])
    assert rows["symmetric"]["step_to_target"]["per_seed"] == pytest.approx([10 + 10 / 1.1, None, 10 + 60 / 7])
    assert rows["symmetric"]["step_to_target"]["reached"] == 2
    reach_difference = rows["symmetric"]["step_to_target"]["vs_reference"]  # paired where both reach it
    assert reach_difference["seeds"] == 2
    assert reach_difference["mean"] == pytest.approx((10 / 1.1 + 60 / 7) / 2 - 20)
    final = rows["symmetric"]["final_eval_loss"]
    assert final["mean_std"]["mean"] == pytest.approx(5.2) and final["mean_std"]["std"] == pytest.approx(0.4)
    assert final["vs_reference"]["mean"] == pytest.approx(-0.1)
    assert rows["symmetric"]["top1"]["vs_reference"]["mean"] == pytest.approx(0.07 / 3)
    absolute, paired = convergence.markdown_tables(list(rows.values()), 3)
    assert "| symmetric | 14 ± 8 | 19 ± 0 (2/3 seeds) | 5.2000 ± 0.4000 | 21.33% ± 4.04% |" in absolute
    assert "| symmetric | -1 [-19, +17], p = 0.8 | -11 [-14, -8], p = 0.015 (2/3 seeds) | -0.1000 [" in paired
    # 30 steps: an exit after step 21 leaves less than 30% of the run past it; symmetric's seed 2 leaves at 23.75
    assert convergence.late_plateau_exits(list(rows.values()), [1, 2, 3], max_steps=30) == [
        "symmetric seed 2 (step 24)"
    ]
    rows["symmetric"]["plateau_exit"]["per_seed"][0] = None
    assert convergence.late_plateau_exits(list(rows.values()), [1, 2, 3], max_steps=40) == ["symmetric seed 1 (never)"]


def study_record(path, exits_by_type):
    """A convergence.json whose only metric with values is the plateau exit: {type: [exit per seed]}."""
    rows = [
        {"attention_type": name, **{metric: {"per_seed": list(exits) if metric == "plateau_exit" else [None] * len(exits)}
                                    for metric in convergence.METRICS}}
        for name, exits in exits_by_type.items()
    ]  # fmt: skip
    path.write_text(json.dumps({"summary": rows}))
    return path


def test_convergence_factor_compares_each_types_effect_across_two_studies(tmp_path, capsys):
    books = study_record(tmp_path / "a.json", {"original": [800, 900, 700], "symmetric": [600, 650, 580]})
    docs = study_record(tmp_path / "b.json", {"original": [360, 340, 380, 350], "symmetric": [420, 400, 450, 410]})
    convergence_factor.main([f"books={books}", f"docs={docs}", "--output", str(tmp_path / "factor.md")])
    table = capsys.readouterr().out
    assert (tmp_path / "factor.md").read_text() == table
    row = next(line for line in table.splitlines() if "plateau exit" in line)
    first, second = [-200, -250, -120], [60, 60, 70, 60]  # per-seed differences to original
    # Welch: the change of the mean effect, its interval on Welch-Satterthwaite degrees of freedom, and p
    welch = stats.ttest_ind(second, first, equal_var=False)
    change = sum(second) / 4 - sum(first) / 3
    assert f"| +{change:.0f} [" in row and f"p = {welch.pvalue:.2g} |" in row
    va, vb = statistics.variance(first) / 3, statistics.variance(second) / 4
    half = stats.t.ppf(0.975, (va + vb) ** 2 / (va**2 / 2 + vb**2 / 3)) * (va + vb) ** 0.5
    assert f"[+{change - half:.0f}, +{change + half:.0f}]" in row
    assert "| flipped; p < 0.05 in both |" in row and "| -190 [-353, -27], p = 0.037 |" in row
    assert next(line for line in table.splitlines() if "final eval loss" in line).count("–") == 4  # no values


def curves_record(path, final_losses, seeds, steps=(50, 100)):
    """A convergence.json with eval-loss curves: each run's loss at the last step is its final_losses entry, and
    half of it at the steps before."""
    curves = {
        f"{name} seed {seed}": {str(step): (loss if step == steps[-1] else loss / 2) for step in steps}
        for name, losses in final_losses.items()
        for seed, loss in zip(seeds, losses)
    }
    rows = [
        {"attention_type": name, **{metric: {"per_seed": [None] * len(seeds)} for metric in convergence.METRICS}}
        for name in final_losses
    ]
    path.write_text(json.dumps({"summary": rows, "seeds": seeds, "eval_loss_curves": curves}))
    return path


def test_convergence_factor_compares_the_loss_at_a_step_both_studies_evaluated(tmp_path, capsys):
    # the seeds in a study's own order; a type without one seed's run pairs the others
    short = curves_record(tmp_path / "a.json", {"original": [5.0, 6.0, 5.5], "symmetric": [4.5, 5.0, 5.3]}, [3, 1, 2])
    long = curves_record(
        tmp_path / "b.json", {"original": [4.0, 4.2, 4.4], "symmetric": [4.1, 4.4]}, [1, 2, 3], steps=(50, 100, 150)
    )
    convergence_factor.main([f"d16={short}", f"d64={long}", "--loss_at_step", "100"])
    row = next(line for line in capsys.readouterr().out.splitlines() if "eval loss at step 100" in line)
    first = [4.5 - 5.0, 5.0 - 6.0, 5.3 - 5.5]
    second = [(4.1 - 4.0) / 2, (4.4 - 4.2) / 2]  # step 100 is half the final loss in the longer study
    assert f"| {sum(first) / 3:+.4f} [" in row and f"| {sum(second) / 2:+.4f} [" in row and "(2/3 seeds)" in row
    assert f"| {sum(second) / 2 - sum(first) / 3:+.4f} [" in row and "| flipped;" in row
    assert_one_line(
        convergence_factor.main, [f"d16={short}", f"d64={long}", "--loss_at_step", "150"],
        "study d16: original seed 3 has no eval loss at step 150 (its curve in {a} covers steps 50 to 100;", capsys,
        a=short,
    )  # fmt: skip
    record = json.loads(long.read_text())
    record["eval_loss_curves"]["symmetric seed 2"]["100"] = "4.1"
    long.write_text(json.dumps(record))
    assert_one_line(
        convergence_factor.main, [f"d16={short}", f"d64={long}", "--loss_at_step", "100"],
        f"study d64: {long}: eval_loss_curves['symmetric seed 2']['100'] is \"4.1\", not a finite number", capsys,
    )  # fmt: skip
    del record["eval_loss_curves"]["symmetric seed 2"]["100"]
    long.write_text(json.dumps(record))
    assert_one_line(
        convergence_factor.main, [f"d16={short}", f"d64={long}", "--loss_at_step", "100"],
        "study d64: symmetric seed 2 has no eval loss at step 100 (its curve in {b} covers steps 50 to 150;", capsys,
        b=long,
    )  # fmt: skip
    no_curves = study_record(tmp_path / "c.json", {"original": [1, 2], "symmetric": [1, 1]})
    assert_one_line(
        convergence_factor.main, [f"d16={short}", f"old={no_curves}", "--loss_at_step", "50"],
        "has no eval-loss curves to read a loss at step 50 from", capsys,
    )  # fmt: skip
    for bad in ("0", "-5", "1.5", "x"):
        assert_one_line(
            convergence_factor.main, [f"d16={short}", f"d64={long}", "--loss_at_step", bad],
            f"--loss_at_step: {bad!r} is not a step", capsys,
        )  # fmt: skip


@pytest.mark.parametrize(
    "studies, message",
    [
        (["books{a}"], "the following arguments are required"),
        (["books{a}", "docs={b}"], "give it as LABEL=PATH"),
        (["books={a}", "docs={missing}"], "missing.json does not exist"),
        (["books={a}", "docs={text}"], "is not a readable JSON file"),
        (["books={a}", "docs={other}"], "holds no convergence summary"),
        (["books={a}", "books={a}"], "both studies are labelled 'books'"),
        (["books={a}", "docs={reference}"], "different reference types: books 'original', docs 'symmetric'"),
    ],
)
def test_convergence_factor_bad_input_is_one_line(studies, message, tmp_path, capsys):
    paths = {
        "a": study_record(tmp_path / "a.json", {"original": [1, 2], "symmetric": [1, 1]}),
        "b": study_record(tmp_path / "b.json", {"original": [1, 2], "symmetric": [1, 1]}),
        "reference": study_record(tmp_path / "r.json", {"symmetric": [1, 2], "original": [1, 1]}),
        "missing": tmp_path / "missing.json",
        "text": tmp_path / "text.json",
        "other": tmp_path / "other.json",
    }
    paths["text"].write_text("not json")
    paths["other"].write_text(json.dumps({"summary": []}))
    assert_one_line(convergence_factor.main, studies, message, capsys, **paths)


def test_convergence_default_types_are_the_registry_and_its_study_variants():
    args, *_ = convergence.parse_command_line(["--", "--recipe", "cpu-demo", "--output_dir", "x"])
    assert [spec.split("+")[0] for spec in args.types if "+" not in spec] == list(ATTENTION_TYPES)
    assert "pairwise+pairwise_init=identity" in args.types
    assert args.specs["pairwise+pairwise_init=identity"] == ("pairwise", {"pairwise_init": "identity"})
    assert args.seeds == [1, 2, 3, 4, 5]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    words = "the river man house walked along bank old city night light water stone road looked said".split()
    return tiny_corpus(tmp_path_factory.mktemp("corpus"), tiny_sentences(300, words, longest=20), vocab_size=100)


def study_pretrain_args(output_dir, corpus, *extra):
    """symbert-pretrain's arguments of a tiny study: 16-token blocks, 4 blocks a step, an evaluation every step."""
    tiny = dict(max_seq_length=16, eval_blocks=4, warmup_steps=1, eval_steps=1, logging_steps=1)
    not_given = dict(max_steps=None, save_steps=None, eval_on_start=None, data_seed=None)  # the recipe's, or extra's
    return run_args(corpus, output_dir, *extra, **tiny, **not_given)


def test_convergence_end_to_end_then_summary_only(tmp_path, corpus, capsys):
    pretrain_args = study_pretrain_args(tmp_path / "runs", corpus, "--max_steps", "2", "--save_strategy", "no")
    summary = tmp_path / "summary"
    convergence.main(
        ["--types", "original,symmetric", "--seeds", "3", "--summary_dir", str(summary), "--", *pretrain_args]
    )
    record = json.loads((summary / "convergence.json").read_text())
    curves = record["eval_loss_curves"]
    assert set(curves) == {"original seed 3", "symmetric seed 3"}
    assert record["late_plateau_exits"] == ["original seed 3 (never)", "symmetric seed 3 (never)"]  # 2 steps
    assert list(curves["symmetric seed 3"]) == ["0", "1", "2"]  # eval on start, then every step
    # default target: original's final eval loss on the same seed
    original = curves["original seed 3"]
    assert record["target_eval_loss"] == {"3": original["2"]}
    assert record["summary"][0]["step_to_target"]["per_seed"] == [
        min(int(s) for s, loss in original.items() if loss <= original["2"])
    ]
    run_scores = json.loads((tmp_path / "runs" / "seed-3" / "symmetric" / "convergence_scores.json").read_text())
    assert record["summary"][1]["top1"]["per_seed"] == [run_scores["model"]["accuracy"]]
    assert record["unigram_baseline"] == {"3": run_scores["unigram"]["loss"]}
    assert (summary / "convergence.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "runs" / "seed-3" / "symmetric" / "training_summary.json").is_file()

    again = tmp_path / "again"
    convergence.main(
        [
            "--types",
            "original,symmetric",
            "--seeds",
            "3",
            "--summarize_only",
            "--summary_dir",
            str(again),
            "--",
            *pretrain_args,
        ]
    )
    rebuilt = json.loads((again / "convergence.json").read_text())
    assert rebuilt["summary"] == record["summary"]
    # the training run's facts come from its record in the output folder, not from the summary-only process
    run = json.loads((tmp_path / "runs" / "convergence_run.json").read_text())
    assert rebuilt["run"] == record["run"] == run and run["wall_seconds"] > 0 and run["parallel"] == 1
    report = (again / "convergence.md").read_text()
    assert f"Command: `{run['command']}`" in report and "rebuilt with --summarize_only" in report
    assert (again / "convergence-difference.png").read_bytes()[:4] == b"\x89PNG"

    # --overwrite_output_dir true trains every run again, and scores it again: the scores kept from the earlier run
    # name another training summary
    retrained = tmp_path / "retrained"
    argv = ["--types", "original,symmetric", "--seeds", "3", "--summary_dir", str(retrained), "--", *pretrain_args]
    convergence.main([*argv, "--overwrite_output_dir", "true", "--max_steps", "1"])
    record = json.loads((retrained / "convergence.json").read_text())
    assert list(record["eval_loss_curves"]["symmetric seed 3"]) == ["0", "1"]
    folder = tmp_path / "runs" / "seed-3" / "symmetric"
    run_scores = json.loads((folder / "convergence_scores.json").read_text())
    summary_sha256 = hashlib.sha256((folder / "training_summary.json").read_bytes()).hexdigest()
    assert run_scores["training_summary_sha256"] == summary_sha256
    assert record["summary"][1]["top1"]["per_seed"] == [run_scores["model"]["accuracy"]]
    assert record["run"]["runs"] == {"trained": 2, "resumed": 0, "reused": 0}

    # a finished run's trainer_state.json with a NaN eval loss (json would read it): one line naming the file,
    # before any summary is written
    state_file = folder / "trainer_state.json"
    state = json.loads(state_file.read_text())
    next(entry for entry in state["log_history"] if "eval_loss" in entry)["eval_loss"] = float("nan")
    state_file.write_text(json.dumps(state))
    damaged = tmp_path / "damaged"
    argv = ["--types", "original,symmetric", "--seeds", "3", "--summarize_only", "--summary_dir", str(damaged)]
    message = f"the Trainer state {state_file} is not a readable JSON file (NaN is not a number JSON allows"
    capsys.readouterr()  # the training's progress bars
    assert_one_line(convergence.main, [*argv, "--", *pretrain_args, "--max_steps", "1"], message, capsys)
    assert not damaged.exists()


# Child process: a convergence study SIGKILLed right after checkpoint-STEP of the run in a folder named TYPE is saved.
# The hook wraps the trainer's own save, so nothing of this lives in the project's code.
STUDY_KILL_DRIVER = """
import os, signal, sys, time
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import convergence
from symbert.training.pretrain import SymBertPretrainingTrainer

kind, step = os.environ["KILL_AFTER_SAVE"].split(":")
save = SymBertPretrainingTrainer._save_checkpoint

def save_then_kill(self, model, trial):
    save(self, model, trial)
    if os.path.basename(self.args.output_dir) == kind and self.state.global_step == int(step):
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)

SymBertPretrainingTrainer._save_checkpoint = save_then_kill
convergence.main(sys.argv[1:])
"""


def file_times(folder):
    """{path: modification time in ns} of every file below `folder`."""
    return {path: path.stat().st_mtime_ns for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.slow  # a stopped or concurrent run: README's suite stays under 10 minutes
def test_a_killed_study_resumes_its_stopped_run_and_reuses_its_finished_ones(tmp_path, corpus, capsys):
    """SIGKILLed after `original` finished, while `symmetric` trains (after its checkpoint-2 of 4), the same command
    run again reads `original` back without training it (its files untouched), resumes `symmetric` from checkpoint-2
    and summarises exactly as an uninterrupted study; a third run trains nothing and gives the same summary again."""

    def study(name):
        pretrain_args = study_pretrain_args(tmp_path / name, corpus, "--max_steps", "4", "--save_steps", "2")
        return ["--types", "original,symmetric", "--seeds", "3", "--summary_dir", str(tmp_path / name), "--"] + (
            pretrain_args
        )

    convergence.main(study("straight"))
    straight = json.loads((tmp_path / "straight" / "convergence.json").read_text())
    capsys.readouterr()

    killed = subprocess.run(
        [sys.executable, "-c", STUDY_KILL_DRIVER, *study("study")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parents[2],
        env={**os.environ, "KILL_AFTER_SAVE": "symmetric:2", "TOKENIZERS_PARALLELISM": "false"},
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    runs = tmp_path / "study" / "seed-3"
    assert (runs / "original" / "training_summary.json").is_file()
    assert (runs / "symmetric" / "checkpoint-2").is_dir() and not (
        runs / "symmetric" / "training_summary.json"
    ).exists()
    assert not (tmp_path / "study" / "convergence.json").exists()
    finished = file_times(runs / "original")

    convergence.main(study("study"))
    out = capsys.readouterr().out
    assert f"original seed 3: already trained in {runs / 'original'} (it holds training_summary.json)" in out
    assert f"Resuming from {runs / 'symmetric' / 'checkpoint-2'}" in out and "original: final eval loss" not in out
    assert file_times(runs / "original") == finished  # read back, not trained again nor scored again
    resumed = json.loads((tmp_path / "study" / "convergence.json").read_text())
    for key in ("summary", "eval_loss_curves", "unigram_baseline", "target_eval_loss"):
        assert resumed[key] == straight[key], key
    assert resumed["run"]["runs"] == {"trained": 1, "resumed": 1, "reused": 1}
    report = (tmp_path / "study" / "convergence.md").read_text()
    assert "The session recorded here trained 1 of the 2 runs (1 resumed from a checkpoint" in report

    every_run = file_times(runs)
    convergence.main(study("study"))
    assert "symmetric seed 3: already trained" in capsys.readouterr().out
    assert file_times(runs) == every_run
    again = json.loads((tmp_path / "study" / "convergence.json").read_text())
    assert again["summary"] == straight["summary"] and again["run"] == resumed["run"]
    assert "rebuilt by a rerun that found every run finished" in (tmp_path / "study" / "convergence.md").read_text()


THROUGHPUT_BAD_ARGUMENTS = [
    (["--sizes", "huge"], "argument --sizes: invalid choice: 'huge'"),
    (["--seq_lens", "x"], "argument --seq_lens: invalid int value: 'x'"),
    (["--seq_lens", "100"], "--seq_lens 100: must be in [1, 512] and divide --tokens_per_batch 512"),
    (["--seq_lens", "1024", "--tokens_per_batch", "1024"], "--seq_lens 1024: must be in [1, 512]"),
    (["--rounds", "0"], "--rounds=0 must be at least 1"),
    (["--matmul_size", "0"], "--matmul_size=0 must be at least 1"),
    (["--warmup", "-1"], "--warmup=-1 must not be negative"),
    (["--vocab_size", "3"], "--vocab_size=3 must be above 5"),
    (["--profile", "bogus"], "--profile has 'bogus'; allowed: original,"),
    (["--profile", "original,"], "--profile has ''"),
    (["--device", "cpu", "--threads", "0"], "--threads=0 must be at least 1"),
    (["--device", "cuda", "--clock", "process"], "--clock process measures CPU time"),
    (["--device", "cuda", "--clock", "user"], "--clock user measures CPU time"),
    (["--seq_lens", "16", "--max_predictions_per_seq", "17"], "--max_predictions_per_seq=17 must be in [1, seq_len]"),
    (["--modes", "compiled", "--compile_backend", "bogus"], "--compile_backend 'bogus' is not a torch.compile backend"),
    (["--output", "{file}/throughput"], "is a file, not a folder; choose another --output"),
    (["--bogus"], "unrecognized arguments: --bogus"),
]
if not torch.cuda.is_available():
    THROUGHPUT_BAD_ARGUMENTS.append((["--device", "cuda"], "--device cuda, but torch sees no CUDA device"))


@pytest.mark.parametrize("argv, message", THROUGHPUT_BAD_ARGUMENTS)
def test_throughput_bad_argument_is_one_line(argv, message, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert_one_line(throughput.main, argv, message, capsys, file=tmp_path / "file")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--size", "huge"], "argument --size: invalid choice: 'huge'"),
        (["--seq_len", "0"], "--seq_len 0: must be in [1, 512]"),
        (["--seq_len", "128", "--tokens_per_batch", "100"], "--seq_len 128: must be in [1, 512] and divide"),
        (["--rounds", "0"], "--rounds=0 must be at least 1"),
        (["--precision", "fp16"], "argument --precision: invalid choice: 'fp16'"),
        (["--output", "{file}/ablation"], "is a file, not a folder; choose another --output"),
    ],
)
def test_ablation_bad_argument_is_one_line(argv, message, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert_one_line(ablation.main, argv, message, capsys, file=tmp_path / "file")


TYPES = "--types"
PRETRAIN = ["--", "--recipe", "cpu-demo", "--output_dir", "{dir}"]  # symbert-pretrain's arguments follow `--`


@pytest.mark.parametrize(
    "argv, message",
    [
        ([TYPES, "original,bogus", *PRETRAIN], "--types has 'bogus'; allowed: original, symmetric"),
        ([TYPES, "original,original", *PRETRAIN], "--types='original,original' repeats an entry"),
        ([TYPES, ",", *PRETRAIN], "--types=',' is empty"),
        ([TYPES, "pairwise+identity", *PRETRAIN], "'pairwise+identity' must be TYPE or TYPE+FIELD=VALUE"),
        ([TYPES, "pairwise+pairwise_init=zeros", *PRETRAIN], "pairwise_init='zeros' is not supported; allowed: normal"),
        ([TYPES, "pairwise+pairwise_inti=normal", *PRETRAIN], "unknown SymBertConfig field 'pairwise_inti'"),
        ([TYPES, "original+attention_type=symmetric", *PRETRAIN], "name the attention type before the first '+'"),
        ([TYPES, "original+num_attention_heads=5", *PRETRAIN], "hidden_size=128 is not divisible by num_attention_heads=5"),
        ([TYPES, "original+max_position_embeddings=8", *PRETRAIN], "max_seq_length=32 is above its max_position_embeddings=8"),
        (["--seeds", "1,x", *PRETRAIN], "--seeds has 'x'; each seed must be an integer in [0, 2**32 - 1]"),
        (["--seeds", "-1", *PRETRAIN], "--seeds has '-1'"),
        (["--seeds", "1,1", *PRETRAIN], "--seeds='1,1' repeats an entry"),
        (["--plateau_margin", "-1", *PRETRAIN], "--plateau_margin=-1.0 must be a finite number of nats, at least 0"),
        (["--plateau_margin", "nan", *PRETRAIN], "--plateau_margin=nan"),
        (["--plateau_margin", "x", *PRETRAIN], "argument --plateau_margin: invalid float value: 'x'"),
        (["--target_eval_loss", "inf", *PRETRAIN], "--target_eval_loss=inf must be a finite number"),
        (["--parallel", "0", *PRETRAIN], "--parallel=0 must be at least 1"),
        (["--parallel", "two", *PRETRAIN], "argument --parallel: invalid int value: 'two'"),
        (["--bogus", *PRETRAIN], "unrecognized arguments: --bogus"),
        (["--summary_dir", "{file}", *PRETRAIN], "summary_dir='{file}': {file} is a file, not a folder"),
        ([TYPES, "original"], "Put the pre-training arguments after `--`"),
        (["--summarize_only", TYPES, "original", "--seeds", "1", *PRETRAIN], "--summarize_only: 1 of the 1 runs are not finished"),
        # after `--`: what symbert-pretrain refuses, and what a study cannot take
        ([*PRETRAIN, "--learning_rate", "nan"], "learning_rate=nan is not allowed; it must be a finite number above 0"),
        ([*PRETRAIN, "--max_steps", "x"], "argument --max_steps/--max-steps: invalid int value: 'x'"),
        ([*PRETRAIN, "--bogus", "1"], "not used by the HfArgumentParser: ['--bogus', '1']"),
        ([*PRETRAIN, "--config_overrides", "{bad"], "config_overrides='{bad' is not a JSON object"),
        ([*PRETRAIN, "--recipe", "nosuch"], "Unknown recipe 'nosuch'"),
        ([*PRETRAIN, "--output_dir", "{file}"], "output_dir='{file}': {file} is a file, not a folder"),
        ([*PRETRAIN, "--compare", "original"], "--compare is the single-seed comparison of symbert-pretrain"),
        ([*PRETRAIN, "--resume_from_checkpoint", "{dir}"], "would resume every run of the study from one checkpoint"),
        ([TYPES, "original", *PRETRAIN, "--train_files", "{file}.txt", "--tokenizer", "{tokenizer}"], "train_files not found: {file}.txt"),
    ],
)  # fmt: skip
def test_convergence_bad_argument_is_one_line(argv, message, tmp_path, corpus, capsys):
    (tmp_path / "file").write_text("")
    paths = {"file": tmp_path / "file", "dir": tmp_path / "runs", "tokenizer": corpus / "tokenizer"}
    assert_one_line(convergence.main, argv, message, capsys, **paths)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file"]  # nothing written


def test_reference_and_memory_targets_come_from_the_attention_classes(monkeypatch):
    """`original` and the memory targets are what the classes say, or the fallback where no class says it."""
    assert throughput_timing.reference_type() == "original"
    assert throughput_timing.memory_target_types() == ("shared", "mhe_add", "mhe_mul")
    classes = SYMBERT_SELF_ATTENTION_CLASSES
    for attribute in ("is_bert_reference", "saves_attention_memory"):
        for cls in {base for cls in classes.values() for base in cls.__mro__ if attribute in vars(base)}:
            monkeypatch.delattr(cls, attribute)
    assert throughput_timing.reference_type() == throughput_timing.FALLBACK_REFERENCE == "original"
    assert throughput_timing.memory_target_types() == throughput_timing.FALLBACK_MEMORY_TARGET_TYPES

    for name, cls in classes.items():
        monkeypatch.setattr(cls, "is_bert_reference", name == "symmetric", raising=False)
        monkeypatch.setattr(cls, "saves_attention_memory", name in ("pairwise", "mhe_mul"), raising=False)
    assert throughput_timing.reference_type() == "symmetric"
    assert throughput_timing.memory_target_types() == ("pairwise", "mhe_mul")
    # a mark is the class's own: a subclass of the reference class (gqa of original) is not BERT
    monkeypatch.setattr(classes["original"], "is_bert_reference", True)
    monkeypatch.delattr(classes["gqa"], "is_bert_reference")
    with pytest.raises(ValueError, match=r"found \['original', 'symmetric'\]"):
        throughput_timing.reference_type()


def test_matmul_rate_is_positive():
    assert throughput_timing.matmul_flops_per_second(torch.device("cpu"), "fp32", 64) > 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and mallinfo2")
def test_kept_cpu_memory_maps_no_large_buffer_of_its_own():
    """With --cpu_memory keep, a 256 MB buffer (allocated as torch's CPU allocator does, with posix_memalign) comes
    from the heap, not from a mapping of its own that glibc would unmap when it is freed (and the next step would
    fault in afresh)."""
    script = """
import ctypes, ctypes.util, sys
sys.path.insert(0, "benchmarks")
import machine

class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = Mallinfo2
if sys.argv[1] == "keep":
    assert machine.keep_freed_memory()
before = libc.mallinfo2().hblkhd
buffer = ctypes.c_void_p()
assert libc.posix_memalign(ctypes.byref(buffer), 64, ctypes.c_size_t(256 * 2**20)) == 0
print(libc.mallinfo2().hblkhd - before)
"""
    mapped = {}
    for setting in ("keep", "release"):
        result = subprocess.run(
            [sys.executable, "-c", script, setting], capture_output=True, text=True, cwd=Path(__file__).parents[2]
        )
        if "mallinfo2" in result.stderr:  # glibc older than 2.33, or not glibc
            pytest.skip("no mallinfo2 in this C library")
        assert result.returncode == 0, result.stderr
        mapped[setting] = int(result.stdout.split()[-1])
    assert mapped["release"] >= 256 * 2**20 and mapped["keep"] == 0


DOC_PAGE = """\
.. _tut-intro:

**********************
An Informal Tutorial
**********************

.. index:: single: tutorial

In the following examples, input and output are told apart by the presence or absence of :term:`prompts <prompt>`
(``>>>`` and ``...``).  See the :func:`~os.path.join` function and `the FAQ <https://example.org>`_ [#]_ for more::

   >>> print("not prose, but code")
   not prose, but code

.. note::
   Comments in the examples are **not** part of the language, and they are *never* shown.

* The first item of a list is a paragraph of its own.
* The second item is one too, although no blank line parts them.

.. code-block:: python

   x = "This line is code in a directive, and it is not kept."

+------------+------------+
| A table is | not prose. |
+------------+------------+

Too short to keep.
"""


def synthetic_deb(pages: dict[str, str]) -> bytes:
    """A .deb (an ar archive around data.tar.xz) holding `pages` under the documentation sources."""
    tar_bytes = io.BytesIO()
    with tarfile.open(fileobj=tar_bytes, mode="w:xz") as tar:
        for page, text in pages.items():
            info = tarfile.TarInfo(f"./{second_corpus.SOURCES}{page}")
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    archive = b"!<arch>\n"
    for name, member in [("debian-binary", b"2.0\n"), ("data.tar.xz", tar_bytes.getvalue())]:
        archive += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(member):<10}`\n".encode() + member
        archive += b"\n" * (len(member) % 2)
    return archive


def test_second_corpus_keeps_the_prose_of_a_package_it_builds(tmp_path, monkeypatch, capsys):
    pages = {"tutorial/intro.rst.txt": DOC_PAGE, "license.rst.txt": "The licence is not part of the corpus at all."}
    blob = synthetic_deb(pages)
    assert list(second_corpus.documentation_pages(blob)) == [("tutorial/intro.rst.txt", DOC_PAGE)]
    lines = second_corpus.build(blob, tmp_path / "docs")
    assert lines == [
        "In the following examples, input and output are told apart by the presence or absence of prompts (>>> and "
        "...). See the join function and the FAQ for more:",
        "Comments in the examples are not part of the language, and they are never shown.",
        "The first item of a list is a paragraph of its own.",
        "The second item is one too, although no blank line parts them.",
    ]
    assert gzip.decompress((tmp_path / "docs.txt.gz").read_bytes()).decode() == "\n".join(lines) + "\n"

    (tmp_path / "other.deb").write_bytes(blob)  # not the pinned package: refused before anything is written
    assert_one_line(second_corpus.main, ["--deb", "{deb}", "--output", "{out}"], "not " + second_corpus.DEB_SHA256,
                    capsys, deb=tmp_path / "other.deb", out=tmp_path / "refused")  # fmt: skip
    monkeypatch.setattr(second_corpus, "DEB_SHA256", hashlib.sha256(blob).hexdigest())
    second_corpus.main(["--deb", str(tmp_path / "other.deb"), "--output", str(tmp_path / "built")])
    assert (tmp_path / "built.txt.gz").read_bytes() == (tmp_path / "docs.txt.gz").read_bytes()
    assert len(AutoTokenizer.from_pretrained(tmp_path / "built-wordpiece-8192")) > 5


def test_score_scale_table_is_each_types_formula_and_refuses_arguments(capsys):
    score_scale.main([])
    formulas, measured = capsys.readouterr().out.split("Attention at initialisation, measured")
    rows = {line.split(" | ")[0]: line for line in formulas.splitlines()}
    measured_rows = {line.split(" | ")[0]: line.split(" | ") for line in measured.splitlines()}
    # the measured table's cells: effective keys of the block; BERT's spread over nearly all 32 and 512 tokens
    effective_keys = [float(cell.split(";")[0]) for cell in measured_rows["| `original`"][1:]]
    assert len(effective_keys) == 4 and all(keys > 0.9 * n for keys, n in zip(effective_keys, (32, 32, 512, 512)))
    # original is its own reference; pairwise's N(0, 1) S at d = 64: √(σ⁴(d·h² + 2h)) / (h·σ²), about √64 = 8
    assert rows["| `original`"].count("(1×)") == 4
    assert "3.69 (8×)" in rows["| `pairwise`"] and "self 3.69" in rows["| `symmetric`"]
    assert_one_line(score_scale.main, ["--seeds", "3"], "unrecognized arguments: --seeds 3", capsys)


def test_attention_at_init_measures_effective_keys_and_self_weight():
    def measured(attention_type, sigma, heads=2, **setting):
        config = SymBertConfig.from_preset(
            "tiny", attention_type=attention_type, num_attention_heads=heads, initializer_range=sigma, **setting
        )
        return score_scale.attention_at_init(config, tokens=32, blocks=8)

    # scores near 0: uniform weights, all 32 keys, 1/32 on itself; scores far apart: one key, itself where K = Q
    assert measured("original", 1e-4) == pytest.approx({"effective_keys": 32, "self_weight": 1 / 32}, rel=1e-3)
    assert measured("symmetric", 1.0) == pytest.approx({"effective_keys": 1, "self_weight": 1}, abs=1e-3)
    # the study's shapes: at d = 64 (2 heads of 64, σ 0.06) K = Q puts half of a query's weight on itself and the
    # paper's N(0, 1) S attends to a few random keys, where BERT's spreads over nearly all 32
    assert measured("original", 0.06)["effective_keys"] > 27
    assert 0.4 < measured("symmetric", 0.06)["self_weight"] < 0.65
    assert measured("pairwise", 0.06)["effective_keys"] < 6
    assert measured("pairwise", 0.06, pairwise_init="identity") == measured("symmetric", 0.06)
