"""The compiled recipe path: `--torch_compile true` with sparse prediction at a fixed number of positions
(max_predictions_per_seq), for every attention type. The aot_eager backend traces and compiles forward and backward
as inductor does, without generating code, so these runs are cheap on a CPU and match uncompiled ones."""

import json
import math

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from helpers.corpora import run_args
from helpers.runs import assert_same_training, eval_losses
from symbert import ATTENTION_TYPES, SymBertForMaskedLM
from symbert.training import pretrain as pretrain_module
from symbert.training.arguments import parse_arguments
from symbert.training.pretrain import pretrain, run

pytestmark = pytest.mark.heavy

# cpu-demo's overrides, with a cap of 4 masked tokens per 32-token block (about 4.3 on average): about half the
# batches of 4 blocks go over their 16 and are capped by the collator (an uncompiled model refuses one that is not)
OVERRIDES = json.dumps(
    {
        "sparse_prediction": True,
        "max_predictions_per_seq": 4,
        "num_attention_heads": 8,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "initializer_range": 0.06,
    }
)
COMPILED = ("--torch_compile", "true", "--torch_compile_backend", "aot_eager")


def compiled_run_args(corpus, output_dir, *extra):
    return run_args(corpus, output_dir, "--config_overrides", OVERRIDES, *extra)


@pytest.fixture
def fresh_dynamo():
    """Dynamo's caches and counters emptied, so that a test counts only its own graphs."""
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def test_every_attention_type_compiles_into_one_graph_and_trains_as_uncompiled(corpus, tmp_path, fresh_dynamo):
    types = ",".join(ATTENTION_TYPES)
    short = ("--compare", types, "--max_steps", "4", "--save_steps", "100")
    run(compiled_run_args(corpus, tmp_path / "eager", *short))
    assert not counters["stats"]["unique_graphs"]
    run(compiled_run_args(corpus, tmp_path / "compiled", *short, *COMPILED))
    # at most one graph per attention type for all its steps (types that trace to the same graph, as symmetric_init
    # and original, share it): no graph break, and static shapes (no recompilation) whatever each batch's number of
    # masked tokens
    assert not counters["graph_break"]
    assert 1 <= counters["stats"]["unique_graphs"] <= len(ATTENTION_TYPES)
    assert counters["aot_autograd"]["ok"] == counters["stats"]["unique_graphs"]
    for kind in ATTENTION_TYPES:
        (eager_step, eager_loss), (step, loss) = (
            eval_losses(tmp_path / "eager" / kind)[-1],
            eval_losses(tmp_path / "compiled" / kind)[-1],
        )
        assert step == eager_step == 4 and math.isfinite(loss)
        assert abs(loss - eager_loss) <= 1e-6, kind


@pytest.mark.slow  # a stopped or concurrent run: README's suite stays under 10 minutes
def test_compiled_run_saves_the_models_own_weights_reports_and_resumes(corpus, tmp_path, capsys, fresh_dynamo):
    eager, compiled = tmp_path / "eager", tmp_path / "compiled"
    pretrain(*parse_arguments(compiled_run_args(corpus, eager)))
    run(compiled_run_args(corpus, compiled, *COMPILED))  # the command's whole job, its report included
    assert counters["stats"]["unique_graphs"] >= 1  # the run did compile

    summary = json.loads((compiled / "training_summary.json").read_text())
    assert summary["training_arguments"]["torch_compile"] is True
    assert summary["training_arguments"]["torch_compile_backend"] == "aot_eager"
    model, loading = SymBertForMaskedLM.from_pretrained(compiled, output_loading_info=True)
    assert not loading["missing_keys"] and not loading["unexpected_keys"]  # no "_orig_mod." in the names
    assert model.config.max_predictions_per_seq == 4 and model.config.sparse_prediction
    assert math.isfinite(summary["final_eval_loss"])
    assert_same_training(compiled, eager)  # eval losses and weights within 1e-5
    assert abs(eval_losses(compiled)[-1][1] - eval_losses(eager)[-1][1]) <= 1e-6
    out = capsys.readouterr().out
    assert "Masked-token prediction on the 8 held-out blocks" in out and "fill-mask (SymBertForMaskedLM" in out

    # interrupted right after checkpoint-4, then run again: it resumes there and ends as the uninterrupted run
    interrupted = tmp_path / "interrupted"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pretrain_module, "SymBertPretrainingTrainer", InterruptedAfterFirstSave)
        with pytest.raises(Interrupted):
            pretrain(*parse_arguments(compiled_run_args(corpus, interrupted, *COMPILED)))
    assert (interrupted / "checkpoint-4").is_dir() and not (interrupted / "training_summary.json").exists()
    pretrain(*parse_arguments(compiled_run_args(corpus, interrupted, *COMPILED)))
    assert "Resuming from" in capsys.readouterr().out
    assert_same_training(interrupted, compiled)


class Interrupted(Exception):
    pass


class InterruptedAfterFirstSave(pretrain_module.SymBertPretrainingTrainer):
    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        raise Interrupted
