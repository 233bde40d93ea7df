"""Hub release: staging from tiny pre-trained models and synthetic GLUE results, validation (including results for
other weights and a tampered staged folder), card metadata round trip, the push path against a recording stand-in
for HfApi, and the tiny random models."""

import contextlib
import dataclasses
import hashlib
import io
import json
import re
import shutil
import statistics
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import transformers
from huggingface_hub import ModelCard
from safetensors.torch import load_file, save_file

from helpers.assertions import file_names
from helpers.corpora import run_args, tiny_corpus, tiny_sentences
from helpers.integrations import WORDS
from helpers.release import BASE_SCORES, NAMESPACE, SEEDS, RecordingHfApi, sha256, tree, write_results
from symbert import ATTENTION_TYPES, SymBertConfig, SymBertForMaskedLM
from symbert.cli import UserError
from symbert.hub_cards import card as cards
from symbert.hub_cards import plan as plans
from symbert.hub_cards import pushing, release, staging, validation
from symbert.hub_cards.plan import Stage
from symbert.hub_cards.release import parse_arguments, release_command
from symbert.hub_cards.tiny_random import save_tiny_random, tiny_tokenizer
from symbert.loading_symbert import BUNDLE_FILES
from symbert.tools import bert_export
from symbert.training.glue import scoring as glue_scoring
from symbert.training.pretrain import main as pretrain

pytestmark = pytest.mark.heavy

SECRET = "hf_thisIsNotARealTokenButMustNeverBeShown"


# The Hub's .eval_results/ format, staged where huggingface_hub has EvalResultEntry (not in the 0.x releases)
EVAL_RESULTS = [cards.EVAL_RESULTS_FILE] if cards.EvalResultEntry is not None else []


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    """Two tiny pre-trained models (original, pairwise) with checkpoints and their GLUE results, released with
    `--push` against a recording stand-in for HfApi (the dry-run path is the tiny random test's)."""
    root = tiny_corpus(tmp_path_factory.mktemp("family"), tiny_sentences(300, WORDS, longest=20), vocab_size=120)
    steps = dict(max_steps=2, warmup_steps=1, eval_steps=2, save_steps=1, logging_steps=1)
    pretrain(run_args(root, root / "runs", compare="original,pairwise", eval_blocks=4, **steps, data_seed=None))
    results = {
        kind: write_results(root / "runs" / kind, root / "glue" / kind / "glue_results.json", offset=i)
        for i, kind in enumerate(("original", "pairwise"))
    }
    shutil.copyfile(
        root / "runs" / "comparison.png", root / "glue" / "glue_vs_step.png"
    )  # stands in for the sweep's plot
    args = [
        str(root / "runs"),
        "--results",
        str(root / "glue"),
        "--namespace",
        NAMESPACE,
        "--checkpoints",
        "1",
        "--output_dir",
        str(root / "staged"),
    ]
    api, printed = RecordingHfApi(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(printed):
        patch.setattr(release, "HfApi", api)
        patch.setattr(release.constants, "HF_HUB_OFFLINE", False)  # the stand-in never goes online
        patch.setenv("HF_TOKEN", SECRET)
        stages = release.release(parse_arguments([*args, "--push"]))
    return SimpleNamespace(
        root=root,
        runs=root / "runs",
        staged=root / "staged",
        results=results,
        stages=stages,
        args=args,
        api=api,
        printed=printed.getvalue(),
    )


def test_stages_each_model_and_checkpoint(family):
    assert [(s.repo_id, s.revision) for s in family.stages] == [
        (f"{NAMESPACE}/symbert-tiny-original", "main"),
        (f"{NAMESPACE}/symbert-tiny-original", "bert"),
        (f"{NAMESPACE}/symbert-tiny-original", "step-1"),
        (f"{NAMESPACE}/symbert-tiny-pairwise", "main"),
        (f"{NAMESPACE}/symbert-tiny-pairwise", "bert"),
        (f"{NAMESPACE}/symbert-tiny-pairwise", "step-1"),
    ]
    main = family.staged / "symbert-tiny-pairwise" / "main"
    assert file_names(tree(main)) == sorted(
        [
            *EVAL_RESULTS,
            "README.md",
            "config.json",
            *BUNDLE_FILES,
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
            "glue_results.json",
            "glue_vs_step.png",
            "loss.png",
            "metrics.csv",
            "metrics.json",
            "trainer_state.json",
            "training_summary.json",
            "provenance.json",
        ]
    )
    source = family.runs / "pairwise"
    for name in ("model.safetensors", "tokenizer.json", "config.json", "loss.png"):
        assert (main / name).read_bytes() == (source / name).read_bytes(), name
    # the records as the run wrote them, but for the paths it ran with: published by their last part only
    summary = json.loads((source / "training_summary.json").read_text())
    assert summary["training_arguments"]["output_dir"].startswith("/")
    assert json.loads((main / "training_summary.json").read_text()) == staging.without_local_paths(summary)
    assert (source / "training_args.bin").is_file() and (source / "checkpoint-1" / "optimizer.pt").is_file()
    staged = [p for p in family.staged.rglob("*") if p.is_file()]  # no pickle anywhere: none by name, none by content
    assert staged and not [
        p for p in staged if p.suffix in (".bin", ".pt", ".pth", ".pkl") or p.read_bytes()[:1] == b"\x80"
    ]
    assert (
        json.loads((main / "config.json").read_text())["auto_map"]["AutoModelForMaskedLM"]
        == "modeling_symbert.SymBertForMaskedLM"
    )
    assert json.loads((main / "glue_results.json").read_text()) == staging.without_local_paths(
        family.results["pairwise"]
    )
    assert json.loads((main / "glue_results.json").read_text())["model"]["name_or_path"] == "pairwise"

    branch = family.staged / "symbert-tiny-pairwise" / "step-1"
    assert (branch / "model.safetensors").read_bytes() == (source / "checkpoint-1" / "model.safetensors").read_bytes()
    assert file_names(tree(branch)) == sorted(
        [
            "README.md",
            "config.json",
            *BUNDLE_FILES,
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
            "loss.png",
            "metrics.csv",
            "trainer_state.json",
            "provenance.json",
        ]
    )
    assert json.loads((branch / "trainer_state.json").read_text())["global_step"] == 1

    provenance = json.loads((main / "provenance.json").read_text())
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=Path(release.__file__).parent, capture_output=True, text=True
    ).stdout.strip()
    assert re.fullmatch(rf"{head}(-dirty)?", provenance["git_commit"])  # -dirty: the shipped code is not committed
    assert provenance["library_versions"]["torch"] == torch.__version__
    assert provenance["tokenizer_sha256"] == sha256(source / "tokenizer.json")
    assert (
        provenance["weights_sha256"]
        == sha256(source / "model.safetensors")
        == family.results["pairwise"]["model"]["weights_sha256"]
    )
    assert provenance["dataset"] == "local files: train.txt"  # as symbert-pretrain recorded it
    project_code = {name: sha256(path) for name, path in staging.code_files().items()}
    assert provenance["code_sha256"] == project_code == {name: sha256(main / name) for name in project_code}


def test_card_metadata_round_trips_and_body_holds_the_numbers(family):
    card = ModelCard.load(family.staged / "symbert-tiny-pairwise" / "main" / "README.md")
    assert (card.data.library_name, card.data.pipeline_tag, card.data.license, card.data.language) == (
        "transformers",
        "fill-mask",
        "apache-2.0",
        "en",
    )
    assert {"symbert", "pairwise"} <= set(card.data.tags)
    scores = family.results["pairwise"]["scores"]
    by_name = {result.dataset_name: result for result in card.data.eval_results}
    assert len(by_name) == 10 and card.data.model_name == "symbert-tiny-pairwise"
    for display, name, config, split, metric in [
        ("CoLA", "cola", "cola", "validation", "matthews_correlation"),
        ("MRPC", "mrpc", "mrpc", "validation", "accuracy_f1_mean"),
        ("MNLI-m", "mnli-m", "mnli", "validation_matched", "accuracy"),
        ("MNLI-mm", "mnli-mm", "mnli", "validation_mismatched", "accuracy"),
    ]:
        result = by_name[f"GLUE {display}"]
        assert (result.dataset_type, result.dataset_config, result.dataset_split, result.metric_type) == (
            "nyu-mll/glue",
            config,
            split,
            metric,
        )
        assert result.metric_value == round(sum(scores[name].values()) / 3, 2)
    glue_per_seed = [sum(scores[name][seed] for name in BASE_SCORES) / 9 for seed in SEEDS]
    glue_mean = sum(glue_per_seed) / 3
    assert (
        by_name["GLUE"].metric_value == round(glue_mean, 2) == 73.29
    )  # 638/9 (base) + 1 (offset) + 0.7 × 2 (mean seed)
    assert card.data.eval_results == family.stages[3].eval_results  # parses back into what it was built from

    body = card.text
    glue_std = statistics.stdev(glue_per_seed)
    assert f"**{glue_mean:.2f} ± {glue_std:.2f}**" in body and "| RTE | accuracy | 57.40 ± 0.70 | 3 |" in body
    config = SymBertConfig.from_pretrained(family.runs / "pairwise")
    ours = SymBertForMaskedLM(config).num_parameters()
    original = SymBertForMaskedLM(SymBertConfig.from_pretrained(family.runs / "original")).num_parameters()
    assert (
        f"| this model (`pairwise`) | {ours:,} |" in body
        and f"| `original` (BERT) of the same shape and vocabulary | {original:,} |" in body
    )
    assert (
        'repo, revision = "symbert-test/symbert-tiny-pairwise", "v0.1.0"' in body and "trust_remote_code=True" in body
    )
    assert "[Q]_i S_i [Q]_iᵀ" in body and "courtois-etal-2024-symmetric" in body and "xue-aletras" not in body
    hardware = json.loads((family.runs / "pairwise" / "training_summary.json").read_text())["hardware"]
    assert (
        "| data | local files: train.txt |" in body
        and f"| hardware | {hardware} |" in body
        and hardware.startswith("CPU")
    )
    assert "| steps | 2 |" in body and "| tokens seen | 256 |" in body  # 2 steps × 4 blocks × 32 tokens
    arguments = json.loads((family.runs / "pairwise" / "training_summary.json").read_text())["training_arguments"]
    assert (
        f"| learning rate | {arguments['learning_rate']}, 1 warm-up steps, then {arguments['lr_scheduler_type']} decay |"
        in body
    )
    assert "training_args.bin" not in body and 'under `"training_arguments"` in `training_summary.json`' in body
    assert "![Train and eval loss against step](loss.png)" in body
    assert "![GLUE score of checkpoints along pre-training](glue_vs_step.png)" in body
    assert (  # only real deviations: the results file records seeds 1-3 and max_steps=2, the rest is the paper's
        "(the paper's protocol: 5 epochs, learning rate 1e-05 with a linear schedule and warm-up ratio 0.1, batch 16, "
        "max length 128, weight decay 0; this run differs in `seeds=1,2,3` (paper: 1,2,3,4,5), `max_steps=2` (paper: -1))"
    ) in body
    assert (
        "## Intended uses" in body and "## Limitations" in body and "not test-server scores, over seeds 1, 2, 3" in body
    )
    assert 'pip install "transformers<6,>=4.54" "torch>=2.4"' in body  # pyproject.toml's ranges

    branch = ModelCard.load(family.staged / "symbert-tiny-pairwise" / "step-1" / "README.md")
    assert branch.data.eval_results is None and "intermediate-checkpoint" in branch.data.tags
    assert "| steps | 1 (this checkpoint) of the run's 2 |" in branch.text and "| steps | 2 |" not in branch.text
    assert "| tokens seen | 128 (up to this checkpoint) |" in branch.text  # 1 step × 4 blocks × 32 tokens
    assert "| eval loss (held-out blocks) | none logged by step 1 |" in branch.text  # evaluated every 2 steps
    assert "final eval loss" not in branch.text and "GLUE numbers are dev-set scores" not in branch.text
    assert 'repo, revision = "symbert-test/symbert-tiny-pairwise", "step-1"' in branch.text
    original_card = ModelCard.load(family.staged / "symbert-tiny-original" / "main" / "README.md").text
    assert "devlin-etal-2019-bert" in original_card and "courtois-etal-2024-symmetric" in original_card


def bert_counts(folder):
    """(the SymBERT model's parameters, its BERT export's), each counted here from its own config.json."""
    symbert = SymBertForMaskedLM(SymBertConfig.from_pretrained(folder / "main")).num_parameters()
    return symbert, transformers.BertForMaskedLM(
        transformers.BertConfig.from_pretrained(folder / "bert")
    ).num_parameters()


def test_bert_stage_is_plain_bert_with_the_source_outputs(family):
    for kind in ("original", "pairwise"):
        repo, source = family.staged / f"symbert-tiny-{kind}", family.runs / kind
        folder = repo / "bert"
        names = ["README.md", "config.json", "model.safetensors", "provenance.json", "tokenizer.json"]
        assert file_names(tree(folder)) == sorted([*names, "tokenizer_config.json"])  # no code
        config = json.loads((folder / "config.json").read_text())
        assert (config["model_type"], config["architectures"], "auto_map" in config) == (
            "bert",
            ["BertForMaskedLM"],
            False,
        )
        model = transformers.AutoModelForMaskedLM.from_pretrained(folder)  # plain transformers, no remote code
        assert type(model) is transformers.BertForMaskedLM
        reference = SymBertForMaskedLM.from_pretrained(source)
        batch = bert_export.check_inputs(reference.config)
        expected, got = bert_export.output_tensors(reference, batch), bert_export.output_tensors(model, batch)
        assert len(got) == 1 + 1 + reference.config.num_hidden_layers  # logits and every layer's hidden states
        assert bert_export.relative_difference(expected, got) <= 1e-5
        texts = ["the old man walked slowly along the [MASK] of the river."]
        encoded = transformers.AutoTokenizer.from_pretrained(folder)(texts)["input_ids"]
        assert encoded == transformers.AutoTokenizer.from_pretrained(source)(texts)["input_ids"]
        provenance = json.loads((folder / "provenance.json").read_text())
        assert provenance["exported_from"] == {
            "revision": "main",
            "weights_sha256": sha256(source / "model.safetensors"),
        }
        assert provenance["weights_sha256"] == sha256(folder / "model.safetensors") and provenance["code_sha256"] == {}
        assert provenance["bert_export"]["max_relative_difference"] <= provenance["bert_export"]["bound"] == 1e-5
    pairwise = bert_export.output_tensors(model, batch)["logits"]
    original = transformers.BertForMaskedLM.from_pretrained(family.staged / "symbert-tiny-original" / "bert")
    assert not torch.allclose(bert_export.output_tensors(original, batch)["logits"], pairwise)  # each its own model


def test_cards_say_how_to_load_the_bert_export_and_what_it_costs(family):
    repo = family.staged / "symbert-tiny-pairwise"
    ours, bert = bert_counts(repo)
    original = SymBertForMaskedLM(SymBertConfig.from_pretrained(family.runs / "original")).num_parameters()
    assert bert == original > ours  # BERT's parameter count: the export is larger than the pairwise model
    main = ModelCard.load(repo / "main" / "README.md").text
    section = main[main.index("## Use it as plain BERT") : main.index("## Provenance")]
    assert 'AutoModelForMaskedLM.from_pretrained("symbert-test/symbert-tiny-pairwise", revision="bert")' in section
    assert 'AutoTokenizer.from_pretrained("symbert-test/symbert-tiny-pairwise", revision="bert")' in section
    assert "trust_remote_code=True)" not in section and "\nNo remote code is needed:" in section
    change = f"+{bert - ours:,} ({100 * (bert - ours) / ours:+.1f}%)"
    assert (
        f"It has BERT's parameter count at inference: {bert:,} parameters against the SymBERT form's {ours:,}, {change}."
        in section
    )
    assert "The export is larger than the `pairwise` model: the variant's saving is a training-time saving" in section
    assert (
        "- Fine-tuning it is fine-tuning BERT: its query, key and value are BERT's independent matrices, so the "
        "`pairwise` constraint on them (the formula above) is not kept"
    ) in section
    difference = json.loads((repo / "bert" / "provenance.json").read_text())["bert_export"]["max_relative_difference"]
    assert f"largest relative difference {difference:.1e} over the logits and every layer's hidden states" in section

    card = ModelCard.load(repo / "bert" / "README.md")
    assert (card.data.library_name, card.data.pipeline_tag, card.data.eval_results) == (
        "transformers",
        "fill-mask",
        None,
    )
    assert "custom_code" not in card.data.tags and {"pairwise", "bert-export"} <= set(card.data.tags)
    assert "[main's card](https://huggingface.co/symbert-test/symbert-tiny-pairwise)" in card.text
    assert "release tag `v0.1.0`" in card.text and "not re-measured on this export" in card.text
    assert "GLUE |" not in card.text and "73.29" not in card.text  # the results stay on main's card
    assert "[Q]_i S_i [Q]_iᵀ" in card.text  # what the model on main computes
    assert (
        'model = AutoModelForMaskedLM.from_pretrained("symbert-test/symbert-tiny-pairwise", revision="bert")'
        in card.text
    )
    assert f"{bert:,} parameters against the SymBERT form's {ours:,}, {change}" in card.text

    repo = family.staged / "symbert-tiny-original"
    main = ModelCard.load(repo / "main" / "README.md").text
    assert bert_counts(repo) == (original, original)
    assert f"{original:,} parameters, as many as the SymBERT form's {original:,}" in main and "is larger" not in main


def test_validation_catches_a_tampered_staged_folder(family, tmp_path):
    folder = tmp_path / "main"
    shutil.copytree(family.staged / "symbert-tiny-pairwise" / "main", folder)
    weights = load_file(folder / "model.safetensors")
    weights["bert.encoder.layer.0.attention.self.pairwise"] += 0.5
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    card = folder / "README.md"
    card.write_text(card.read_text() + "\n![GLUE](glue_missing.png)\n")
    main = family.stages[3]
    stage = Stage(main.repo_id, "main", folder, family.runs / "pairwise", main.eval_results, main.eval_entries)
    with pytest.raises(UserError) as error:
        validation.validate([stage])
    message = str(error.value)
    assert "Validation failed; nothing was pushed." in message and str(folder) in message
    assert "does not reproduce the logits of" in message
    assert "glue_results.json was measured on weights" in message
    assert "the card names files that are not in the folder: glue_missing.png" in message
    assert "provenance.json's weights, tokenizer or code sha256 does not match" in message


def test_results_for_other_weights_are_refused(family, tmp_path):
    pairwise, original_results = family.runs / "pairwise", family.root / "glue" / "original" / "glue_results.json"
    output = tmp_path / "staged"
    base = ["--namespace", NAMESPACE, "--dataset", "x", "--output_dir", str(output)]
    with pytest.raises(
        UserError, match=r"No GLUE results file for .*pairwise .*Results files found are for other weights:\n.*original"
    ):
        release_command([str(pairwise), "--results", str(original_results), *base])
    pairwise_results = family.root / "glue" / "pairwise" / "glue_results.json"
    with pytest.raises(
        UserError,
        match=r"original/glue_results.json is the GLUE result of other weights .* than any model being released",
    ):
        release_command([str(pairwise), "--results", str(pairwise_results), str(original_results), *base])
    sweep = tmp_path / "sweep" / "pairwise" / "step-2" / "glue_results.json"  # fewer runs on the same weights
    results = write_results(pairwise, sweep)
    results["scores"] = {"rte": results["scores"]["rte"]}
    results["aggregates"] = glue_scoring.aggregate(results["scores"], results["protocol"]["seeds"])  # as symbert-glue's
    sweep.write_text(json.dumps(results))
    sharded = write_results(pairwise, tmp_path / "sweep" / "bert" / "step-1" / "glue_results.json")
    sharded["model"]["weights_sha256"] = (
        None  # weights without a single model.safetensors: skipped when found in a folder
    )
    (tmp_path / "sweep" / "bert" / "step-1" / "glue_results.json").write_text(json.dumps(sharded))
    (plan,) = plans.plan_models(
        parse_arguments([str(pairwise), "--results", str(pairwise_results), str(sweep.parents[2]), *base])
    )
    assert plan.results_path == pairwise_results.resolve()
    forged = tmp_path / "forged" / "glue_results.json"  # right hash, wrong attention type
    write_results(family.runs / "original", forged, sha=sha256(pairwise / "model.safetensors"))
    with pytest.raises(UserError, match="says attention_type='original' but .* is 'pairwise'"):
        release_command([str(pairwise), "--results", str(forged), *base])
    assert not output.exists()  # refused before anything was staged


def test_bad_input_is_refused_before_any_work(family, tmp_path, monkeypatch):
    output = tmp_path / "staged"
    base = ["--namespace", NAMESPACE, "--dataset", "x", "--output_dir", str(output)]
    no_tokenizer = tmp_path / "no-tokenizer"
    shutil.copytree(family.runs / "pairwise", no_tokenizer, ignore=shutil.ignore_patterns("tokenizer*", "checkpoint-*"))
    with pytest.raises(UserError, match=r"no-tokenizer lacks tokenizer \(tokenizer_config.json and tokenizer.json"):
        release_command([str(no_tokenizer), "--results", str(family.root / "glue"), *base])
    with pytest.raises(UserError, match="No GLUE results file for"):
        release_command([str(family.runs / "pairwise"), "--results", str(tmp_path), *base])
    with pytest.raises(UserError, match=r"has no checkpoint-7; its checkpoints: \[1, 2\]"):
        release_command(
            [str(family.runs / "pairwise"), "--results", str(family.root / "glue"), "--checkpoints", "7", *base]
        )
    older = tmp_path / "older"  # an output from before symbert-pretrain recorded its data
    shutil.copytree(family.runs / "pairwise", older, ignore=shutil.ignore_patterns("checkpoint-*"))
    summary = json.loads((older / "training_summary.json").read_text())
    (older / "training_summary.json").write_text(
        json.dumps({k: v for k, v in summary.items() if k != "data_arguments"})
    )
    with pytest.raises(
        UserError, match="older/training_summary.json does not record the pre-training data .*; pass --dataset"
    ):
        release_command(
            [str(older), "--results", str(family.root / "glue"), "--namespace", NAMESPACE, "--output_dir", str(output)]
        )
    newer = tmp_path / "newer" / "glue_results.json"
    write_results(family.runs / "pairwise", newer)
    newer.write_text(newer.read_text().replace('"schema_version": 1', '"schema_version": 2'))
    with pytest.raises(UserError, match="has schema_version=2; this release tool reads 1"):
        release_command([str(family.runs / "pairwise"), "--results", str(newer), *base])
    monkeypatch.setattr(release, "get_token", lambda: None)
    with pytest.raises(UserError, match="--push needs a Hugging Face token: set HF_TOKEN or run `hf auth login`"):
        release_command([*family.args[:-1], str(output), "--push"])
    assert not output.exists()


def test_push_creates_repositories_commits_branches_and_collection(family):
    api, output = family.api, family.staged
    repos = [f"{NAMESPACE}/symbert-tiny-original", f"{NAMESPACE}/symbert-tiny-pairwise"]
    assert api.tokens == [SECRET]  # handed to HfApi ...
    assert SECRET not in family.printed and "pushed branch step-1" in family.printed  # ... and never shown
    assert not any(SECRET.encode() in p.read_bytes() for p in output.rglob("*") if p.is_file())

    assert [call[0] for call in api.of("create_repo")] == repos
    commits = api.of("create_commit")
    assert [(repo, revision) for repo, revision, *_ in commits] == [
        (r, rev) for r in repos for rev in ("main", "bert", "step-1")
    ]
    for repo, revision, added, deleted in commits:
        folder = output / repo.split("/")[1] / revision
        assert added == tree(folder), (repo, revision)
        if revision == "main":
            assert deleted == []
        elif revision == "bert":  # from main's commit: main's code and every file of the SymBERT release go
            assert deleted == sorted(set(tree(output / repo.split("/")[1] / "main")) - set(added))
            assert {"modeling_symbert.py", "configuration_symbert.py", "glue_results.json"} <= set(deleted)
            assert {"config.json", "README.md", "model.safetensors"} <= set(added)  # replacing main's
        else:  # the branch starts from main's commit: files only the final model has go
            assert deleted == [
                *EVAL_RESULTS,
                "glue_results.json",
                "glue_vs_step.png",
                "metrics.json",
                "training_summary.json",
            ]
    main_oids = {repo: hashlib.sha1(f"{repo}@main".encode()).hexdigest() for repo in repos}
    assert api.of("create_tag") == [(repo, "v0.1.0", main_oids[repo]) for repo in repos]
    assert api.of("create_branch") == [
        (repo, branch, main_oids[repo]) for repo in repos for branch in ("bert", "step-1")
    ]
    assert "pushed branch bert" in family.printed
    assert api.of("create_collection") == [("SymBERT", NAMESPACE, True)]
    assert api.of("add_collection_item") == [(f"{NAMESPACE}/symbert-0123456789abcdef", repo, "model") for repo in repos]


def test_existing_repository_with_other_content_needs_force(family, capsys):
    args = parse_arguments(family.args)
    pairwise_main = next(s for s in family.stages if s.repo_id.endswith("pairwise") and s.revision == "main")
    stages = [pairwise_main]
    repo = pairwise_main.repo_id
    staged = tree(pairwise_main.folder)

    api = RecordingHfApi(remote={repo: {"main": {**staged, "README.md": b"an older card"}}})
    with pytest.raises(UserError, match=f"These repositories exist with different content: {repo}. Pass --force"):
        pushing.push_or_explain(stages, api, args)
    assert api.calls == []  # nothing written

    api = RecordingHfApi(remote={repo: {"main": {**staged, ".gitattributes": b"*.safetensors filter=lfs"}}})
    pushing.push_or_explain(stages, api, args)
    assert api.of("create_commit") == [] and "already holds exactly these files" in capsys.readouterr().out

    args = dataclasses.replace(args, force=True)
    api = RecordingHfApi(remote={repo: {"main": {**staged, "old.bin": b"stale"}}})
    pushing.push_or_explain(stages, api, args)
    ((_, revision, added, deleted),) = api.of("create_commit")
    assert revision == "main" and added == staged and deleted == ["old.bin"]

    args = dataclasses.replace(args, force=False)
    api = RecordingHfApi(remote={repo: {"main": {".gitattributes": b"*.bin filter=lfs"}}})  # created, never filled
    pushing.push_or_explain(stages, api, args)
    assert [call[:2] for call in api.of("create_commit")] == [(repo, "main")]

    args = dataclasses.replace(args, force=True)
    api = RecordingHfApi(remote={repo: {"main": {"README.md": b"x"}}}, tags=["v0.1.0"])
    with pytest.raises(UserError, match="already has the tag 'v0.1.0'; pass a new --tag"):
        pushing.push_or_explain(stages, api, args)
    assert api.calls == []


def test_tiny_random_models_for_every_attention_type(tmp_path, capsys):
    output = tmp_path / "tiny"
    stages = release.release(parse_arguments(["--tiny_random", "--namespace", NAMESPACE, "--output_dir", str(output)]))
    assert [(s.repo_id, s.revision) for s in stages] == [
        (f"{NAMESPACE}/tiny-random-symbert-{kind}", revision)
        for kind in ATTENTION_TYPES
        for revision in ("main", "bert")
    ]
    tokenizer = tiny_tokenizer()
    counts = {kind: bert_counts(output / f"tiny-random-symbert-{kind}") for kind in ATTENTION_TYPES}
    assert len({bert for _, bert in counts.values()}) == 1  # every export has BERT's count: the one of `original`
    assert counts["original"][0] == counts["original"][1] == counts["symmetric_init"][0]
    assert all(counts[kind][0] < counts[kind][1] for kind in ("mhe_add", "mhe_mul", "shared", "symmetric", "pairwise"))
    for stage, export, kind in zip(stages[::2], stages[1::2], ATTENTION_TYPES, strict=True):
        assert json.loads((export.folder / "config.json").read_text())["model_type"] == "bert"
        export_card = ModelCard.load(export.folder / "README.md").text
        assert "randomly initialised" in export_card
        ours, bert = counts[kind]  # each card states its type's counts, and what follows from them
        than = (
            f" against the SymBERT form's {ours:,}, +{bert - ours:,}"
            if ours < bert
            else f", as many as the SymBERT form's {ours:,}"
        )
        for text in (export_card, ModelCard.load(stage.folder / "README.md").text):
            assert f"It has BERT's parameter count at inference: {bert:,} parameters{than}" in text
            assert (f"The export is larger than the `{kind}` model" in text) == (ours < bert)
        config = json.loads((stage.folder / "config.json").read_text())
        assert (
            config["attention_type"] == kind and config["hidden_size"] == 32 and config["vocab_size"] == len(tokenizer)
        )
        assert (stage.folder / "model.safetensors").stat().st_size < 300_000
        card = ModelCard.load(stage.folder / "README.md")
        assert {"tiny-random", kind} <= set(card.data.tags) and card.data.eval_results is None
        assert "randomly initialised" in card.text
        again = save_tiny_random(kind, tmp_path / "again" / kind, tokenizer)  # same seed, same weights
        assert sha256(again / "model.safetensors") == sha256(stage.folder / "model.safetensors")
    printed = capsys.readouterr().out
    assert (
        f"collection 'SymBERT tiny random' in symbert-test: {len(ATTENTION_TYPES)} models" in printed
        and "Dry run: nothing pushed." in printed
    )
