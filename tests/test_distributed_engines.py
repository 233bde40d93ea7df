"""Scaling out on the Trainer's engines: DDP without the unused-parameter search for every attention type, the FSDP2
accelerate config and the DeepSpeed ZeRO-2 config shipped in training/accelerate/ (docs/distributed.md).

accelerate runs FSDP only on accelerators: on CPU processes (gloo) it drops the FSDP plugin and wraps the model in
DDP, so FSDP2 itself is not trained here; the test below that shows it fails the day accelerate runs FSDP on CPU."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from accelerate.commands.config.config_args import ClusterConfig

from conftest import tiny_config
from symbert import ATTENTION_TYPES, SymBertForMaskedLM
from symbert import modeling_symbert as modeling
from symbert.training.arguments import model_config, parse_arguments
from test_pretrain import LAUNCHERS, corpus, run_args  # noqa: F401  (corpus is a fixture)

ACCELERATE_DIR = Path(__file__).parent.parent / "training" / "accelerate"
FSDP2_CONFIG = ACCELERATE_DIR / "fsdp2.yaml"
DEEPSPEED_CONFIG = ACCELERATE_DIR / "deepspeed_zero2.json"

# Runs symbert-pretrain and prints, from each process, what the Trainer wrapped the model in at its first step
DRIVER = textwrap.dedent(
    """
    import json, sys
    import torch
    from symbert.training import pretrain

    original_step = pretrain.SymBertPretrainingTrainer.training_step

    def training_step(self, model, *args, **kwargs):
        loss = original_step(self, model, *args, **kwargs)
        if self.state.global_step == 0 and not getattr(self, "_wrapping_reported", False):
            self._wrapping_reported = True
            wrapped = self.model_wrapped
            ddp = isinstance(wrapped, torch.nn.parallel.DistributedDataParallel)
            report = {
                "attention_type": self.model.config.attention_type,
                "rank": self.args.process_index,
                "fsdp": self.is_fsdp_enabled,
                "wrapper": type(wrapped).__name__,
                # DDP's own record of the search it runs after each backward (0 or 1)
                "find_unused_parameters": wrapped._get_ddp_logging_data()["find_unused_parameters"] if ddp else None,
            }
            print("WRAPPING " + json.dumps(report), flush=True)
        return loss

    pretrain.SymBertPretrainingTrainer.training_step = training_step
    pretrain.main(sys.argv[1:])
    """
)


def launch(tmp_path, args, timeout=240):
    """symbert-pretrain in 2 gloo processes (torchrun), through DRIVER; the result and each process's report."""
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    result = subprocess.run(
        [sys.executable, *LAUNCHERS["torchrun"], str(driver), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"},
    )
    reports = [json.loads(report) for report in re.findall(r"WRAPPING (\{[^{}]*\})", result.stdout)]  # lines may mix
    return result, reports


@pytest.mark.parametrize("sparse_prediction", [False, True])
def test_every_parameter_gets_a_gradient_from_one_mlm_step(attention_type, sparse_prediction):
    """What ddp_find_unused_parameters=false needs: one MLM backward reaches every trainable parameter, for every
    attention type, with the full or the sparse prediction head, and even for a batch with nothing masked (DDP
    waits for every parameter's gradient at each step; a parameter left out would hang or fail the next step)."""
    torch.manual_seed(0)
    model = SymBertForMaskedLM(tiny_config(attention_type, sparse_prediction=sparse_prediction))
    input_ids = torch.randint(1, 99, (2, 12))
    for masked in (True, False):
        model.zero_grad(set_to_none=True)
        labels = torch.full_like(input_ids, -100)
        if masked:
            labels[:, 3] = input_ids[:, 3]
        model(input_ids=input_ids, labels=labels).loss.backward()
        assert [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None] == []


@pytest.mark.slow
def test_two_process_ddp_runs_without_the_unused_parameter_search_for_every_attention_type(corpus, tmp_path):  # noqa: F811
    """One 2-process launch trains each attention type 2 steps (--compare) with --ddp_find_unused_parameters false:
    the DDP wrapper says it searches for no unused parameter, and the second step runs (DDP fails it when the first
    left a parameter without gradient)."""
    output_dir = tmp_path / "ddp"
    args = run_args(corpus, output_dir, "--compare", ",".join(ATTENTION_TYPES), "--ddp_find_unused_parameters", "false")
    args += ["--max_steps", "2", "--eval_steps", "2", "--save_steps", "2", "--logging_steps", "1"]
    result, reports = launch(tmp_path, args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted((r["attention_type"], r["rank"]) for r in reports) == sorted(
        (kind, rank) for kind in ATTENTION_TYPES for rank in (0, 1)
    )
    for report in reports:
        assert report["wrapper"] == "DistributedDataParallel" and report["find_unused_parameters"] == 0, report
    assert "find_unused_parameters=True was specified" not in result.stderr  # DDP's warning when it searched
    for kind in ATTENTION_TYPES:
        summary = json.loads((output_dir / kind / "training_summary.json").read_text())
        assert summary["steps"] == 2 and summary["world_size"] == 2
        assert summary["training_arguments"]["ddp_find_unused_parameters"] is False


@pytest.mark.slow
def test_fsdp_on_cpu_processes_trains_with_ddp(corpus, tmp_path):  # noqa: F811
    """Why FSDP2 is not trained on CPU here: with --fsdp (FSDP2) on gloo processes, accelerate (on MULTI_CPU) keeps
    no FSDP plugin and the Trainer wraps the model in DDP; the run succeeds, unsharded. If this fails, accelerate
    shards on CPU: train FSDP2 here instead (docs/distributed.md says how far it was taken)."""
    fsdp_config = json.dumps({"version": 2, "transformer_layer_cls_to_wrap": ["SymBertLayer"]})
    args = run_args(corpus, tmp_path / "fsdp", "--fsdp", "--fsdp_config", fsdp_config, "--max_steps", "2")
    args += ["--eval_steps", "2", "--save_steps", "2", "--ddp_find_unused_parameters", "false"]
    result, reports = launch(tmp_path, args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(reports) == 2
    for report in reports:
        assert not report["fsdp"] and report["wrapper"] == "DistributedDataParallel", report
    assert not list((tmp_path / "fsdp" / "checkpoint-2").glob("pytorch_model_fsdp*"))


def test_fsdp2_config_is_a_valid_accelerate_config_wrapping_symberts_layer():
    """training/accelerate/fsdp2.yaml loads as accelerate launch reads it: FSDP2, one unit per SymBertLayer (a class
    of the model, and one that must not be split), full state dicts (what the Trainer's save_model writes a model
    from), bf16 on 8 processes, weights not loaded on rank 0 only (the model is built from scratch, same seed)."""
    config = ClusterConfig.from_yaml_file(str(FSDP2_CONFIG))
    assert config.distributed_type == "FSDP" and config.num_processes == 8 and config.mixed_precision == "bf16"
    fsdp = config.fsdp_config
    assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    layer = fsdp["fsdp_transformer_layer_cls_to_wrap"]
    assert isinstance(getattr(modeling, layer), type) and issubclass(getattr(modeling, layer), torch.nn.Module)
    assert layer in SymBertForMaskedLM._no_split_modules
    with torch.device("meta"):
        model = SymBertForMaskedLM(tiny_config())
    assert sum(type(module).__name__ == layer for module in model.modules()) == model.config.num_hidden_layers
    assert fsdp["fsdp_state_dict_type"] == "FULL_STATE_DICT" and fsdp["fsdp_reshard_after_forward"] is True
    assert fsdp["fsdp_cpu_ram_efficient_loading"] is False and fsdp["fsdp_offload_params"] is False
    assert not config.use_cpu
    assert yaml.safe_load(FSDP2_CONFIG.read_text())["fsdp_config"] == fsdp  # nothing dropped by accelerate's reader


def test_deepspeed_zero2_config_fills_every_auto_value_from_the_paper_base_recipe(tmp_path, monkeypatch):
    """training/accelerate/deepspeed_zero2.json, as the Trainer's DeepSpeed integration fills it for the paper-base
    recipe: every "auto" gets the recipe's value (batch, accumulation, clipping, precision, bucket size from the
    hidden size), nothing disagrees, and it names no optimizer or scheduler, so the Trainer builds them (AdamW with
    SymBERT's weight-decay groups, the recipe's linear warm-up and decay). DeepSpeed itself is not installed here:
    only the Trainer's filling of the file is run (its check that deepspeed is installed is skipped)."""
    from accelerate.utils.deepspeed import HfDeepSpeedConfig
    from transformers.integrations import deepspeed as hf_deepspeed

    monkeypatch.setattr(hf_deepspeed, "dep_version_check", lambda package: None)
    monkeypatch.setattr(hf_deepspeed, "set_hf_deepspeed_config", lambda config: None)  # no global left behind

    class TrainerDeepSpeedConfig(hf_deepspeed.HfTrainerDeepSpeedConfig, HfDeepSpeedConfig):
        """The Trainer's config class on accelerate's reader, as transformers builds it when deepspeed is there."""

    settings = json.loads(DEEPSPEED_CONFIG.read_text())
    assert settings["zero_optimization"]["stage"] == 2
    assert "optimizer" not in settings and "scheduler" not in settings
    _, model_args, _, args = parse_arguments(["--recipe", "paper-base", "--output_dir", str(tmp_path)])
    ds_config = TrainerDeepSpeedConfig(str(DEEPSPEED_CONFIG))
    ds_config.trainer_config_process(args)
    with torch.device("meta"):
        model = SymBertForMaskedLM(model_config(model_args))
    ds_config.trainer_config_finalize(args, model, num_training_steps=args.max_steps)  # raises on a mismatch
    assert "auto" not in json.dumps(ds_config.config)
    batch = args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
    assert ds_config.config["train_batch_size"] == batch == 256  # the recipe's global batch on this 1 process
    assert ds_config.config["zero_optimization"]["reduce_bucket_size"] == model.config.hidden_size**2
