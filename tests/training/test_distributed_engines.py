"""Scaling out on the Trainer's engines: DDP without the unused-parameter search for every attention type, FSDP2
trained on 2 CPU processes (accelerate forced to FSDP there), the FSDP2 accelerate config and the DeepSpeed ZeRO-2
config shipped in training/accelerate/ (docs/distributed.md)."""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import transformers
import yaml
from accelerate.commands.config.config_args import ClusterConfig
from safetensors.torch import load_file

from helpers.corpora import run_args
from helpers.runs import LAUNCHERS
from helpers.tiny import tiny_config
from symbert import ATTENTION_TYPES, SymBertForMaskedLM
from symbert import modeling_symbert as modeling
from symbert.loading_symbert import BUNDLE_FILES
from symbert.training.arguments import model_config, parse_arguments
from symbert.training.checkpoint_checks import checkpoint_problem

ACCELERATE_DIR = Path(__file__).parents[2] / "training" / "accelerate"
FSDP2_CONFIG = ACCELERATE_DIR / "fsdp2.yaml"
DEEPSPEED_CONFIG = ACCELERATE_DIR / "deepspeed_zero2.json"

# Runs symbert-pretrain and prints, from each process, what the Trainer wrapped the model in at its first step
DRIVER = textwrap.dedent(
    """
    import json, sys
    import torch
    from torch.distributed.tensor import DTensor
    from symbert.training import pretrain

    original_step = pretrain.SymBertPretrainingTrainer.training_step

    def training_step(self, model, *args, **kwargs):
        loss = original_step(self, model, *args, **kwargs)
        if self.state.global_step == 0 and not getattr(self, "_wrapping_reported", False):
            self._wrapping_reported = True
            wrapped = getattr(model, "_orig_mod", model)  # the model the step ran (under torch.compile, what it wraps)
            ddp = isinstance(wrapped, torch.nn.parallel.DistributedDataParallel)
            report = {
                "attention_type": self.model.config.attention_type,
                "rank": self.args.process_index,
                "fsdp": self.is_fsdp_enabled,
                "wrapper": type(wrapped).__name__,
                # DDP's own record of the search it runs after each backward (0 or 1)
                "find_unused_parameters": wrapped._get_ddp_logging_data()["find_unused_parameters"] if ddp else None,
                # FSDP2 shards each parameter into a DTensor
                "parameters": len(list(wrapped.parameters())),
                "sharded": sum(isinstance(p, DTensor) for p in wrapped.parameters()),
            }
            print("WRAPPING " + json.dumps(report), flush=True)
        return loss

    pretrain.SymBertPretrainingTrainer.training_step = training_step
    pretrain.main(sys.argv[1:])
    """
)


# accelerate (1.15) applies FSDP only on accelerators: on gloo CPU processes its state is MULTI_CPU, and the branch of
# AcceleratorState.__init__ that keeps the FSDP plugin (and sets the type FSDP) is taken for GPU-like types only, so
# the Trainer would wrap the model in DDP. This patch, the only change to accelerate, does what that branch does
# (without mixed precision) for MULTI_CPU too, once accelerate has chosen: the type becomes FSDP (in PartialState's
# shared state as well, which every later AcceleratorState copies) and the plugin is kept. Everything else (fully_shard, the state dicts, the
# Trainer's FSDP saves and loads) is accelerate's, transformers' and torch's own code, run on CPU tensors.
FORCE_FSDP_ON_CPU = textwrap.dedent(
    """
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    accelerate_init = AcceleratorState.__init__

    def init(self, *args, fsdp_plugin=None, **kwargs):
        accelerate_init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and not getattr(self, "fsdp_plugin", None):
            print("ACCELERATE CHOSE " + self.distributed_type.value, flush=True)
            if self.distributed_type == DistributedType.MULTI_CPU:
                PartialState._shared_state["distributed_type"] = self.distributed_type = DistributedType.FSDP
                self.fsdp_plugin = fsdp_plugin

    AcceleratorState.__init__ = init
    """
)


def launch(tmp_path, args, timeout=240, force_fsdp=False):
    """symbert-pretrain in 2 gloo processes (torchrun), through DRIVER (after FORCE_FSDP_ON_CPU with `force_fsdp`);
    the result and each process's report."""
    driver = tmp_path / "driver.py"
    driver.write_text(FORCE_FSDP_ON_CPU + DRIVER if force_fsdp else DRIVER)
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
@pytest.mark.xdist_group("several_processes")  # .ci/run: one at a time beside the other slow tests
def test_two_process_ddp_runs_without_the_unused_parameter_search_for_every_attention_type(corpus, tmp_path):
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
@pytest.mark.xdist_group("several_processes")  # .ci/run: one at a time beside the other slow tests
@pytest.mark.skipif(
    int(transformers.__version__.split(".")[0]) < 5,
    reason="transformers 4.x builds accelerate's FSDP plugin itself, which accelerate refuses without an accelerator "
    "before this test's patch can make the CPU processes FSDP ones (5.x hands it to the Accelerator, where it can)",
)
def test_fsdp2_trains_sharded_on_two_cpu_processes_and_resumes_exactly(corpus, tmp_path):
    """FSDP2 (fsdp2.yaml's settings, as Trainer arguments) on 2 gloo processes, accelerate forced to FSDP there
    (FORCE_FSDP_ON_CPU; accelerate itself chose MULTI_CPU, that is DDP): every parameter is a DTensor, the run
    trains 4 steps and saves checkpoint-2 and checkpoint-4 in FSDP's files, which the run folder's check accepts; a
    rerun from checkpoint-2 (as after a kill) ends with the same weights, bit for bit, and the same eval losses; the
    final folder holds SymBERT's code and auto_map (not torch's FSDP classes) and loads with from_pretrained."""
    fsdp_config = {
        "version": 2,
        "transformer_layer_cls_to_wrap": ["SymBertLayer"],
        "reshard_after_forward": True,
        "state_dict_type": "FULL_STATE_DICT",
    }
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"

    def train(output_dir):
        fsdp = ("--fsdp", "full_shard", "--fsdp_config", json.dumps(fsdp_config))  # "full_shard": 4.x needs a value
        args = run_args(corpus, output_dir, *fsdp, "--max_steps", "4")
        args += ["--eval_steps", "2", "--save_steps", "2", "--logging_steps", "1"]
        result, reports = launch(tmp_path, args, force_fsdp=True)
        assert result.returncode == 0, result.stderr[-3000:]
        return result, reports

    result, reports = train(straight)
    assert result.stdout.count("ACCELERATE CHOSE MULTI_CPU") == 2  # else accelerate shards on CPU by itself
    assert sorted(report["rank"] for report in reports) == [0, 1]
    for report in reports:
        assert report["fsdp"] and report["wrapper"] == "FSDPSymBertForMaskedLM", report
        assert report["sharded"] == report["parameters"] > 0, report
    checkpoint = straight / "checkpoint-2"
    assert (checkpoint / "pytorch_model_fsdp.bin").is_file() and (checkpoint / "optimizer.bin").is_file()
    assert not (checkpoint / "optimizer.pt").exists()
    assert checkpoint_problem(checkpoint) is None and checkpoint_problem(straight / "checkpoint-4") is None

    shutil.copytree(checkpoint, resumed / checkpoint.name)  # a run killed after its save at step 2
    result, _ = train(resumed)
    assert f"Resuming from {resumed / checkpoint.name}" in result.stdout
    final = {
        name: load_file(folder / "model.safetensors") for name, folder in (("straight", straight), ("resumed", resumed))
    }
    assert final["straight"].keys() == final["resumed"].keys()
    for key, tensor in final["straight"].items():
        assert torch.equal(tensor, final["resumed"][key]), key

    def eval_losses(folder):
        state = json.loads((folder / "trainer_state.json").read_text())
        return [(entry["step"], entry["eval_loss"]) for entry in state["log_history"] if "eval_loss" in entry]

    assert eval_losses(resumed) == eval_losses(straight) and [step for step, _ in eval_losses(straight)] == [2, 4]

    for folder in (straight, straight / "checkpoint-4"):
        assert set(BUNDLE_FILES) <= {path.name for path in folder.glob("*.py")}
        assert not list(folder.glob("_fsdp*"))
        config = json.loads((folder / "config.json").read_text())
        assert config["auto_map"]["AutoModelForMaskedLM"] == "modeling_symbert.SymBertForMaskedLM"
        assert config["architectures"] == ["SymBertForMaskedLM"]
    model = SymBertForMaskedLM.from_pretrained(straight)
    weights = load_file(straight / "checkpoint-4" / "model.safetensors")
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, weights.get(name, tensor)), name  # tied copies are saved once


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
