"""What the staged model cards say: a checkpoint's card gives that checkpoint's step, tokens and eval loss (from its
own trainer_state.json), the GLUE protocol line names only real deviations from the paper's protocol, and the GLUE
results are staged both as the card's model-index and as the Hub's .eval_results/ files, which parse back (with
huggingface_hub's own parsers) into the numbers of glue_results.json."""

import contextlib
import io
import json
import shutil
from types import SimpleNamespace

import pytest
import yaml
from huggingface_hub import ModelCard
from huggingface_hub.repocard import metadata_load
from huggingface_hub.repocard_data import model_index_to_eval_results

from helpers.corpora import tiny_sentences
from helpers.integrations import WORDS
from helpers.release import BASE_SCORES, NAMESPACE, fake_run, write_results
from symbert.hub_cards import card as cards
from symbert.hub_cards import plan, pushing, validation
from symbert.hub_cards.plan import Stage
from symbert.hub_cards.release import release_command
from symbert.training.data.tokenizer import train_wordpiece
from symbert.training.glue import command as glue
from symbert.training.glue import scoring as glue_scoring
from symbert.training.glue import sweep as glue_sweep

needs_eval_results = pytest.mark.skipif(
    cards.EvalResultEntry is None, reason="this huggingface_hub has no EvalResultEntry (the .eval_results/ format)"
)
# Per step: the run's log, and each checkpoint's own (checkpoint-3's eval at step 2 differs from the run's, to show
# which file the card reads: a resumed run logs that step again).
RUN_LOG = [
    {"loss": 5.5, "step": 1},
    {"eval_loss": 5.0, "step": 2},
    {"loss": 4.5, "step": 3},
    {"eval_loss": 4.0, "step": 4},
]
CHECKPOINT_LOGS = {2: RUN_LOG[:2], 3: [RUN_LOG[0], {"eval_loss": 4.9, "step": 2}, RUN_LOG[2]]}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A faked 4-step symbert-pretrain output with checkpoints 2 and 3 (batch 4 × 32 tokens), released as a dry run."""
    root = tmp_path_factory.mktemp("cards")
    lines = tiny_sentences(200, WORDS, longest=20)
    folder = fake_run(root / "runs" / "tiny-original", train_wordpiece(lines, vocab_size=120), root / "unpickled")
    for step, log in CHECKPOINT_LOGS.items():
        checkpoint = shutil.copytree(folder / "checkpoint-1", folder / f"checkpoint-{step}")
        (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": log}))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 4, "log_history": RUN_LOG}))
    summary = json.loads((folder / "training_summary.json").read_text())
    (folder / "training_summary.json").write_text(json.dumps({**summary, "steps": 4, "final_eval_loss": 4.0}))
    results = write_results(folder, root / "glue" / "glue_results.json")
    output = root / "staged"
    with contextlib.redirect_stdout(io.StringIO()):
        stages = release_command(
            [
                str(folder),
                "--results",
                str(root / "glue"),
                "--namespace",
                NAMESPACE,
                "--checkpoints",
                "2,3",
                "--output_dir",
                str(output),
            ]
        )
    return SimpleNamespace(
        root=root, folder=folder, results=results, stages=stages, repo=output / "symbert-tiny-original"
    )


def test_each_revision_card_gives_its_own_step_tokens_and_eval_loss(run):
    main = ModelCard.load(run.repo / "main" / "README.md").text
    assert "| steps | 4 |" in main and "| tokens seen | 512 |" in main  # 4 steps × 4 blocks × 32 tokens
    assert "| final eval loss | 4.0000 (held-out blocks) |" in main
    for step, tokens, loss in [
        (2, 256, "5.0000 at step 2"),
        (3, 384, "4.9000 at step 2, the latest evaluation before step 3"),
    ]:
        card = ModelCard.load(run.repo / f"step-{step}" / "README.md")
        assert f"its weights after\n**{step}** of the run's 4 pre-training steps" in card.text
        assert f"| steps | {step} (this checkpoint) of the run's 4 |" in card.text
        assert f"| tokens seen | {tokens} (up to this checkpoint) |" in card.text
        assert f"| eval loss (held-out blocks) | {loss} |" in card.text
        assert "| steps | 4 |" not in card.text and "| tokens seen | 512" not in card.text and "4.0000" not in card.text
        assert "| training time | 1.11 h (4,000 s) (the whole run) |" in card.text
        assert f"A small training budget: {tokens} tokens of local files: train.txt" in card.text
        assert "pre-training went on to step 4; the final model is on `main`" in card.text
        assert card.data.eval_results is None and not (run.repo / f"step-{step}" / ".eval_results").exists()
    no_state = shutil.copytree(run.folder / "checkpoint-2", run.root / "no-state" / "checkpoint-2")
    (no_state / "trainer_state.json").unlink()
    assert plan.checkpoint_eval_loss(no_state, 2) == "not recorded (checkpoint-2 has no trainer_state.json)"
    assert plan.checkpoint_eval_loss(run.folder / "checkpoint-3", 1) == "none logged by step 1"


def test_cards_have_intended_uses_limitations_and_an_install_line(run):
    card = (run.repo / "main" / "README.md").read_text()
    sections = [line for line in card.splitlines() if line.startswith("## ")]
    assert sections.index("## Intended uses") < sections.index("## Limitations") < sections.index("## Usage")
    assert "## Implementation choices" in sections
    assert "comparing this attention variant with BERT's and the other SymBERT variants" in card
    vocab_size = json.loads((run.repo / "main" / "config.json").read_text())["vocab_size"]
    assert f"English only, with {cards.indefinite_article(vocab_size)} {vocab_size:,}-token WordPiece" in card
    size = json.loads((run.folder / "training_summary.json").read_text())["size"]
    if size == "tiny":  # the demo size is not offered as a fine-tuning starting point
        assert "too small to be a starting point for fine-tuning" in card and "A starting point" not in card
    assert "Pre-trained on 32-token blocks: longer inputs (up to its 512 positions)" in card
    assert "loading needs `trust_remote_code=True`; pin a revision" in card
    assert "GLUE numbers are dev-set scores (as in the paper), not test-server scores, over seeds 1, 2, 3." in card
    assert '```bash\npip install "transformers<6,>=4.54" "torch>=2.4"\n```' in card  # pyproject.toml's ranges


def test_protocol_line_lists_only_real_deviations(tmp_path):
    glue_args, training_args, tasks, seeds = glue.parse_arguments(["--model", "m", "--output_dir", str(tmp_path)])
    paper = {
        **glue_sweep.pair_protocol(glue_args, training_args),
        "seeds": seeds,
        "tasks": tasks,
    }  # as symbert-glue records it
    assert (paper["max_steps"], paper["gradient_accumulation_steps"], paper["world_size"], paper["data"]) == (
        -1,
        1,
        1,
        "nyu-mll/glue",
    )
    assert cards.protocol_text(paper) == (
        "the paper's protocol: 5 epochs, learning rate 1e-05 with a linear schedule and warm-up ratio 0.1, batch 16, "
        "max length 128, weight decay 0; trained in fp32; no deviation from it"
    )
    changed = {
        **paper,
        "max_steps": 10,
        "world_size": 2,
        "data": "/home/me/glue_data",
        "tasks": ["rte", "cola"],
        "seeds": [5, 4, 3, 2, 1],
        "bf16": True,
    }
    assert cards.protocol_text(changed).endswith(
        "; this run differs in `max_steps=10` (paper: -1), `world_size=2` (paper: 1), `data=glue_data` (paper: "
        "nyu-mll/glue), `tasks=rte,cola` (paper: cola,sst2,mrpc,qqp,stsb,mnli,qnli,rte), `bf16=True`"
    )  # the seeds in another order are no deviation; a local path is shown by its name only


@needs_eval_results
def test_eval_results_files_and_model_index_give_the_numbers_of_glue_results_json(run):
    main = run.repo / "main"
    scores = run.results["aggregates"]
    expected = {name: round(scores["tasks"][name]["mean"], 2) for name in BASE_SCORES}
    expected["glue"] = round(scores["glue"]["mean"], 2)

    entries = cards.parse_eval_result_entries(yaml.safe_load((main / ".eval_results" / "glue.yaml").read_text()))
    assert {entry.dataset_id for entry in entries} == {"nyu-mll/glue"}
    task_ids = {"mnli-m": "mnli_matched", "mnli-mm": "mnli_mismatched", "glue": "glue_score"}
    assert {entry.task_id: entry.value for entry in entries} == {
        task_ids.get(name, name): value for name, value in expected.items()
    }
    assert next(e for e in entries if e.task_id == "stsb").notes.startswith("STS-B (Pearson + Spearman) / 2 in percent")

    model_name, model_index = model_index_to_eval_results(metadata_load(main / "README.md")["model-index"])
    by_dataset = {result.dataset_name: result for result in model_index}
    displays = {score.name: f"GLUE {score.display}" for *_, score in cards.reported_scores(glue_mean_only=True)}
    assert model_name == "symbert-tiny-original"
    assert {name: by_dataset[displays.get(name, "GLUE")].metric_value for name in expected} == expected
    assert ModelCard.load(main / "README.md").data.eval_results == model_index

    provenance = json.loads((main / "provenance.json").read_text())
    assert provenance["eval_results_sha256"] == {
        ".eval_results/glue.yaml": plan.sha256(main / ".eval_results" / "glue.yaml")
    }
    assert validation.check_safety(main) == [] and validation.check_files(run.stages[0]) == []
    assert ".eval_results/glue.yaml" in pushing.staged_files(main)  # pushed with the rest


@needs_eval_results
def test_validation_refuses_changed_eval_results(run, tmp_path):
    folder = shutil.copytree(run.repo / "main", tmp_path / "main")
    results_file = folder / ".eval_results" / "glue.yaml"
    entries = yaml.safe_load(results_file.read_text())
    entries[0]["value"] += 70  # CoLA
    results_file.write_text(yaml.safe_dump(entries))
    stage = Stage(
        run.stages[0].repo_id, "main", folder, run.folder, run.stages[0].eval_results, run.stages[0].eval_entries
    )
    assert validation.check_files(stage) == [
        ".eval_results/glue.yaml does not parse back into the GLUE results it was built from",
        "provenance.json's eval_results sha256 does not match the folder's .eval_results files",
    ]
    results_file.write_text("- dataset: [not, a, mapping\n")
    assert (
        validation.check_files(stage)[0]
        == ".eval_results/glue.yaml does not parse back into the GLUE results it was built from"
    )


def test_without_eval_result_entry_the_card_keeps_model_index_only(run, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("symbert.hub_cards.eval_results.EvalResultEntry", None)  # as under huggingface_hub 0.x
    output = tmp_path / "staged"
    stage, _ = release_command(
        [str(run.folder), "--results", str(run.root / "glue"), "--namespace", NAMESPACE, "--output_dir", str(output)]
    )
    notices = [line for line in capsys.readouterr().err.splitlines() if "EvalResultEntry" in line]
    assert (
        len(notices) == 1
        and "has no EvalResultEntry, so GLUE results on the Hub's GLUE data are staged in the card's model-index only"
        in notices[0]
    )
    assert not (stage.folder / ".eval_results").exists() and stage.eval_entries == []
    card = ModelCard.load(stage.folder / "README.md")
    assert (
        card.data.eval_results == run.stages[0].eval_results
        and "The same numbers are in this card's `model-index` metadata." in card.text
    )
    assert json.loads((stage.folder / "provenance.json").read_text())["eval_results_sha256"] == {}


def test_scores_on_local_data_name_that_data_and_make_no_leaderboard_entry(run, tmp_path, capsys):
    data_dir = tmp_path / "my_glue"  # symbert-glue --data_dir: the results file records its absolute path
    path = tmp_path / "glue" / "glue_results.json"
    results = write_results(run.folder, path, data=str(data_dir))
    # baselines as symbert-glue records them: SST-2 (85 + 0.7 × seed) at its dev set's majority class, 872 examples
    # of which 763 positive (87.50%); RTE (55.7, 56.4, 57.1) well above a 50/50 dev set of 2,000
    tasks = results["aggregates"]["tasks"]
    for name, labels in [("sst2", [1] * 763 + [0] * 109), ("rte", [0, 1] * 1000)]:
        baseline = glue_scoring.baseline_scores(name, {"validation": labels})[name]
        tasks[name]["baseline"] = glue_scoring.learning_verdict(tasks[name], baseline)
    path.write_text(json.dumps(results))
    stage, _ = release_command(
        [
            str(run.folder),
            "--results",
            str(tmp_path / "glue"),
            "--namespace",
            NAMESPACE,
            "--output_dir",
            str(tmp_path / "out"),
        ]
    )
    card = ModelCard.load(stage.folder / "README.md")
    assert card.data.eval_results is None and "model-index" not in metadata_load(stage.folder / "README.md")
    assert stage.eval_results == stage.eval_entries == [] and not (stage.folder / ".eval_results").exists()
    cola_sha = results["data_sha256"]["cola"][:12]
    assert (
        f"scored on the dev sets of\nlocal data `my_glue` (sha256 of each task's files: cola `{cola_sha}`, "
        in card.text
    )
    assert ", not the Hub's nyu-mll/glue; mean ± sample standard deviation" in card.text
    assert "These scores are not on the Hub's GLUE data: they are in no metadata of this card" in card.text
    assert "nyu-mll/glue)" not in card.text.replace("(paper: nyu-mll/glue)", "") and "leaderboard)" not in card.text
    assert validation.check_files(stage) == []
    assert "| SST-2 | accuracy | 86.40 ± 0.70 | 3 | 87.50 / 50.00 | **did not learn** |" in card.text
    assert "| RTE | accuracy | 56.40 ± 0.70 | 3 | 50.00 / 50.00 | above (margin 2.24) |" in card.text  # 2 × √(¼/2000)
    assert "| CoLA | Matthews correlation | 21.40 ± 0.70 | 3 | not recorded | not measured |" in card.text
    assert "**SST-2: did not learn** — within the baselines' noise" in card.text
    # this model's notices (an old huggingface_hub adds one about its missing EvalResultEntry)
    notices = [line for line in capsys.readouterr().err.splitlines() if line.startswith(f"notice: {NAMESPACE}/")]
    assert notices == [
        f"notice: symbert-test/symbert-tiny-original: the GLUE scores are on local data my_glue (sha256 of each task's "
        f"files: cola {cola_sha}, sst2 {results['data_sha256']['sst2'][:12]}, mrpc 222222222222, qqp 333333333333, "
        "stsb 444444444444), not the Hub's nyu-mll/glue: the card says so; no model-index, no .eval_results file, no "
        "leaderboard entry.",
        "notice: symbert-test/symbert-tiny-original: GLUE SST-2 86.40 did not learn: within 2.24 of its better "
        "baseline (majority 87.50, chance 50.00).",
    ]
    hub = ModelCard.load(run.repo / "main" / "README.md").text  # the same numbers on the Hub's data
    assert "scored on the dev sets of\n[nyu-mll/glue](https://huggingface.co/datasets/nyu-mll/glue); mean" in hub


@pytest.mark.parametrize(
    "number, article", [(8192, "an"), (800, "an"), (11, "an"), (18000, "an"), (30522, "a"), (1, "a"), (128, "a")]
)
def test_numbers_get_the_article_they_are_read_with(number, article):
    assert cards.indefinite_article(number) == article


def test_counts_are_singular_or_plural():
    assert cards.counted(1, "accumulation step") == "1 accumulation step"
    assert cards.counted(2, "process", "processes") == "2 processes"
