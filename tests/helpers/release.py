"""Release fixtures: runs, GLUE results and a recording Hub API for symbert-release's tests."""

import contextlib
import hashlib
import io
import json
import pickle
import shutil
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from huggingface_hub import CommitOperationAdd, CommitOperationDelete
from huggingface_hub.errors import RevisionNotFoundError
from huggingface_hub.hf_api import RepoFile  # not at the top level of the 0.x releases transformers 4.x needs
from huggingface_hub.utils.sha import git_hash
from transformers import TrainingArguments

from helpers.corpora import tiny_sentences
from symbert import SymBertConfig, SymBertForMaskedLM
from symbert.hub_cards.release import release_command
from symbert.training.data.tokenizer import train_wordpiece
from symbert.training.reporting import write_metrics

# Synthetic per-seed scores (percent) of the nine GLUE numbers; each model gets its own offset.
BASE_SCORES = {
    "cola": 20.0,
    "sst2": 85.0,
    "mrpc": 80.0,
    "qqp": 84.0,
    "stsb": 80.0,
    "mnli-m": 75.0,
    "mnli-mm": 76.0,
    "qnli": 83.0,
    "rte": 55.0,
}


NAMESPACE = "symbert-test"


WORDS = "the a river man woman house walked slowly along bank old young city night light water stone road".split()


class RecordingHfApi:
    """Stands in for HfApi: answers from `remote` ({repo_id: {revision: {path: bytes}}}) and records every call that
    would write to the Hub."""

    def __init__(self, remote=None, tags=()):
        self.remote, self.tags, self.calls, self.tokens = remote or {}, list(tags), [], []

    def __call__(self, token=None):  # used as the HfApi class
        self.tokens.append(token)
        return self

    def repo_exists(self, repo_id, **kwargs):
        return repo_id in self.remote

    def list_repo_tree(self, repo_id, revision=None, recursive=False, **kwargs):
        if revision not in self.remote[repo_id]:
            raise RevisionNotFoundError(
                "no such revision", response=SimpleNamespace(headers={}, request=None, status_code=404)
            )
        files = self.remote[repo_id][revision]
        return [RepoFile(path=path, size=len(content), oid=git_hash(content)) for path, content in files.items()]

    def list_repo_refs(self, repo_id, **kwargs):
        return SimpleNamespace(
            tags=[SimpleNamespace(name=t) for t in self.tags],
            branches=[SimpleNamespace(name=b) for b in self.remote[repo_id]],
        )

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))

    def create_commit(self, repo_id, operations, *, commit_message, revision=None, **kwargs):
        added = {
            op.path_in_repo: Path(op.path_or_fileobj).read_bytes()
            for op in operations
            if isinstance(op, CommitOperationAdd)
        }
        deleted = sorted(op.path_in_repo for op in operations if isinstance(op, CommitOperationDelete))
        self.calls.append(("create_commit", repo_id, revision, added, deleted))
        return SimpleNamespace(oid=hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest())

    def create_tag(self, repo_id, *, tag, revision=None, **kwargs):
        self.calls.append(("create_tag", repo_id, tag, revision))

    def create_branch(self, repo_id, *, branch, revision=None, **kwargs):
        self.calls.append(("create_branch", repo_id, branch, revision))

    def delete_branch(self, repo_id, *, branch, **kwargs):
        self.calls.append(("delete_branch", repo_id, branch))

    def create_collection(self, title, *, namespace=None, exists_ok=False, **kwargs):
        self.calls.append(("create_collection", title, namespace, exists_ok))
        return SimpleNamespace(slug=f"{namespace}/{title.lower()}-0123456789abcdef")

    def add_collection_item(self, collection_slug, item_id, item_type, **kwargs):
        self.calls.append(("add_collection_item", collection_slug, item_id, item_type))

    def of(self, kind):
        return [call[1:] for call in self.calls if call[0] == kind]


def tree(folder):
    """{relative path: bytes} of every file under `folder`."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def write_results(model_folder, path, offset=0.0, sha=None, data="nyu-mll/glue"):
    """A glue_results.json in the format symbert-glue writes (schema_version 1), for the weights in `model_folder`,
    scored on `data` (symbert-glue's record: the Hub dataset, or a local --data_dir's absolute path)."""
    scores = {name: {seed: base + offset + 0.7 * int(seed) for seed in SEEDS} for name, base in BASE_SCORES.items()}
    per_seed = {seed: statistics.mean(scores[name][seed] for name in BASE_SCORES) for seed in SEEDS}
    results = {
        "schema_version": 1,
        "model": {
            "name_or_path": str(model_folder),
            "revision": None,
            "weights_sha256": sha or sha256(model_folder / "model.safetensors"),
            "attention_type": json.loads((model_folder / "config.json").read_text())["attention_type"],
            "num_parameters": 1,
        },
        "protocol": {
            "epochs": 5,
            "learning_rate": 1e-05,
            "lr_scheduler_type": "linear",
            "warmup_ratio": 0.1,
            "per_device_train_batch_size": 16,
            "max_length": 128,
            "weight_decay": 0.0,
            "seeds": [int(s) for s in SEEDS],
            "tasks": ["cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte"],
            "max_steps": 2,
            "warmup_steps": None,
            "data": data,
        },
        "data_sha256": {name: f"{i:x}" * 64 for i, name in enumerate(["cola", "sst2", "mrpc", "qqp", "stsb"])},
        "runs": {"mrpc": {seed: mrpc_metrics(scores["mrpc"][seed]) for seed in SEEDS}},
        "scores": scores,
        "aggregates": {
            "tasks": {
                name: {"mean": statistics.mean(s.values()), "std": statistics.stdev(s.values()), "n": 3}
                for name, s in scores.items()
            },
            "glue": {
                "mean": statistics.mean(per_seed.values()),
                "std": statistics.stdev(per_seed.values()),
                "per_seed": per_seed,
                "n_seeds": 3,
                "complete": True,
            },
        },
        "created": "2026-11-22T23:00:00Z",
        "library_versions": {"transformers": "5", "torch": "2", "symbert": "0.1.0"},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2))
    return results


def mrpc_metrics(score):
    """An MRPC run's metrics that give `score` (percent): accuracy 0.01 above it, F1 0.01 below."""
    return {"accuracy": score / 100 + 0.01, "f1": score / 100 - 0.01, "score": score}


def fake_run(folder, tokenizer, marker, size="tiny"):
    """A symbert-pretrain output folder with a checkpoint-1, as the Trainer leaves them: weights, tokenizer, JSON
    logs, a training_summary.json with "training_arguments", and pickles (optimizer, scheduler, RNG state and a
    training_args.bin that must never be loaded)."""
    config = SymBertConfig.from_preset("tiny", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = SymBertForMaskedLM(config)
    state = {"global_step": 1, "log_history": [{"loss": 4.6, "step": 1}, {"eval_loss": 4.4, "step": 1}]}
    for target in (folder, folder / "checkpoint-1"):
        model.save_pretrained(target)
        tokenizer.save_pretrained(target)
        (target / "trainer_state.json").write_text(json.dumps(state))
        write_metrics(state["log_history"], target)
        (target / "training_args.bin").write_bytes(pickle.dumps(RunsCodeWhenUnpickled(marker)))
        for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
            torch.save({"step": torch.tensor(1)}, target / name)
    arguments = TrainingArguments(
        output_dir=str(folder),
        max_steps=1,
        warmup_steps=1,
        learning_rate=5e-4,
        seed=7,
        use_cpu=True,
        report_to=[],
    ).to_dict()
    summary = {
        "recipe": "cpu-demo",
        "attention_type": "original",
        "size": size,
        "parameters": model.num_parameters(),
        "world_size": 1,
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "global_batch_size": 4,
        "max_seq_length": 32,
        "steps": 1,
        "final_eval_loss": 4.4,
        "hardware": "CPU (2 threads)",
        "data_arguments": {"dataset_name": None, "train_files": ["/data/train.txt"]},
        "training_arguments": json.loads(json.dumps(arguments)),
        "train_runtime": RUNTIME,
    }
    (folder / "training_summary.json").write_text(json.dumps(summary, indent=2))
    return folder


def bad_results(run, folder, change):
    """A glue_results.json of the run's weights in `folder`, changed by `change` (a function of the dict)."""
    results = write_results(run.folder, folder / "glue_results.json")
    change(results)
    (folder / "glue_results.json").write_text(json.dumps(results))
    return folder / "glue_results.json"


def copy_run(run, folder, **summary_changes):
    """A copy of the run's final model (no checkpoints) with training_summary.json changed: None removes a key."""
    shutil.copytree(run, folder, ignore=shutil.ignore_patterns("checkpoint-*"))
    summary = json.loads((folder / "training_summary.json").read_text())
    summary.update(summary_changes)
    summary = {key: value for key, value in summary.items() if value is not None}
    (folder / "training_summary.json").write_text(json.dumps(summary))
    return folder


def release_args(model, run, output, *more):
    return [str(model), "--results", str(run.glue), "--namespace", NAMESPACE, "--output_dir", str(output), *more]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("release-safety")
    tokenizer = train_wordpiece(tiny_sentences(200, WORDS, longest=20), vocab_size=120)
    marker = root / "unpickled"
    folder = fake_run(root / "runs" / "tiny-original", tokenizer, marker)
    write_results(folder, root / "glue" / "glue_results.json")
    return SimpleNamespace(root=root, folder=folder, glue=root / "glue", marker=marker)


@pytest.fixture(scope="module")
def staged(run):
    """A dry run of the faked run with its checkpoint as a branch."""
    output = run.root / "staged"
    with contextlib.redirect_stdout(io.StringIO()):
        stages = release_command(
            [
                str(run.folder),
                "--results",
                str(run.glue),
                "--namespace",
                NAMESPACE,
                "--checkpoints",
                "1",
                "--output_dir",
                str(output),
            ]
        )
    return SimpleNamespace(output=output, stages=stages)


SEEDS = ["1", "2", "3"]


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


RUNTIME = 4000.0  # seconds, as the summary records it


class RunsCodeWhenUnpickled:
    """A training_args.bin whose unpickling creates `marker`: loading it with weights_only=False runs code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")
