"""Releasing a model made from a pretrained BERT: converted by symbert-convert from a tiny sentence-embedding BERT,
distilled toward it, scored on a task of another dataset beside baselines fine-tuned identically. Its card names the
teacher, its licence, the conversion and the distillation; its main and bert branches load in sentence-transformers."""

import json
import statistics
from types import SimpleNamespace

import pytest
import torch
from huggingface_hub import ModelCard
from transformers import AutoTokenizer

from helpers.corpora import run_args, tiny_corpus, tiny_sentences
from helpers.tiny import sentence_embedding_bert
from symbert.hub_cards import release
from symbert.hub_cards.plan import sha256
from symbert.tools import convert
from symbert.training.pretrain import main as pretrain

pytestmark = pytest.mark.heavy


def assert_one_line(main, argv, message, capsys):
    """`main(argv)` exits with status 2 and one line naming `message` (notices of the installed huggingface_hub
    aside, as an older one prints them first)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("notice: ")]
    assert exit_info.value.code == 2 and len(lines) == 1 and message in lines[0], lines


SEEDS = (1, 2, 3)


def uci_results(path, model, scores, data_sha="ab" * 32, **protocol):
    """A glue_results.json of symbert-glue's format with accuracy `scores` (one per seed) on uci_sentiment."""
    by_seed = {str(seed): score for seed, score in zip(SEEDS, scores)}
    results = {
        "schema_version": 1,
        "model": {"name_or_path": str(model), "revision": None, "weights_sha256": sha256(model / "model.safetensors")},
        "protocol": {
            "epochs": 5.0,
            "learning_rate": 1e-05,
            "per_device_train_batch_size": 16,
            "max_length": 128,
            "seeds": list(SEEDS),
            "tasks": ["uci_sentiment"],
            "data": "/home/someone/data",
            **protocol,
        },
        "data_sha256": {"uci_sentiment": data_sha},
        "runs": {},
        "scores": {"uci_sentiment": by_seed},
        "aggregates": {
            "tasks": {
                "uci_sentiment": {
                    "mean": statistics.mean(scores),
                    "std": statistics.stdev(scores),
                    "n": 3,
                    "baseline": {"majority": 51.67, "chance": 50.0, "margin": 4.08, "did_not_learn": False},
                }
            },
            "glue": {"mean": None, "std": None, "per_seed": {}, "n_seeds": 0, "complete": False},
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results))
    return path


@pytest.fixture(scope="module")
def distilled(tmp_path_factory):
    root = tmp_path_factory.mktemp("distilled")
    corpus = tiny_corpus(root / "corpus", tiny_sentences(300, seed=4), vocab_size=120)
    tokenizer = AutoTokenizer.from_pretrained(corpus / "tokenizer")
    teacher = sentence_embedding_bert(root / "st-bert", tokenizer)
    calibration = root / "calibration.txt"
    calibration.write_text("\n".join(tiny_sentences(40, seed=9)) + "\n")
    convert.main(
        [
            str(teacher),
            str(root / "converted"),
            "--attention_type",
            "pairwise",
            "--held_out",
            "8",
            "--calibration_files",
            str(calibration),
        ]
    )
    run = root / "run"
    args = run_args(corpus, run, tokenizer=None, max_seq_length=32, learning_rate="1e-3")
    pretrain([*args, "--init_from", str(root / "converted"), "--teacher", str(teacher)])
    uci_results(root / "glue" / "glue_results.json", run, [90.0, 91.0, 92.0])
    uci_results(root / "teacher.json", teacher, [92.0, 92.5, 93.0])
    uci_results(root / "scratch.json", root / "converted", [60.0, 62.0, 64.0])
    argv = [
        str(run),
        "--results",
        str(root / "glue"),
        "--namespace",
        "symbert-test",
        "--name_template",
        "symbert-tiny-st-{attention_type}",
        "--base_model",
        "someone/tiny-sentence-bert",
        "--baselines",
        f"the teacher={root / 'teacher.json'}",
        f"pairwise from scratch={root / 'scratch.json'}",
        "--output_dir",
        str(root / "staged"),
    ]
    stages = release.release_command(argv)
    return SimpleNamespace(root=root, run=run, teacher=teacher, tokenizer=tokenizer, stages=stages, argv=argv)


def test_main_and_bert_carry_the_conversion_and_the_sentence_transformers_configuration(distilled):
    assert [(s.repo_id, s.revision) for s in distilled.stages] == [
        ("symbert-test/symbert-tiny-st-pairwise", "main"),
        ("symbert-test/symbert-tiny-st-pairwise", "bert"),
    ]
    for stage in distilled.stages:
        for name in ("conversion.json", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json"):
            assert (stage.folder / name).read_bytes() == (distilled.run / name).read_bytes(), name


@pytest.mark.parametrize("revision", ["main", "bert"])
def test_each_branch_gives_the_teachers_kind_of_sentence_embeddings_in_sentence_transformers(distilled, revision):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    folder = next(s.folder for s in distilled.stages if s.revision == revision)
    texts = ["the old house stood by the river", "a letter came at night"]
    model = sentence_transformers.SentenceTransformer(str(folder), device="cpu", trust_remote_code=revision == "main")
    from symbert import SymBertModel

    encoder = SymBertModel.from_pretrained(distilled.run).eval()
    batch = distilled.tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = encoder(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1)
    torch.testing.assert_close(torch.as_tensor(model.encode(texts)), expected, atol=1e-5, rtol=1e-5)


def test_the_card_names_teacher_licence_conversion_distillation_data_and_baselines(distilled):
    main = distilled.stages[0].folder
    card = ModelCard.load(main / "README.md")
    assert card.data.license == "apache-2.0" and card.data.base_model == "someone/tiny-sentence-bert"
    assert card.data.pipeline_tag == "sentence-similarity"
    assert {"distillation", "sentence-transformers", "pairwise"} <= set(card.data.tags)
    text = card.text
    assert (
        "[someone/tiny-sentence-bert](https://huggingface.co/someone/tiny-sentence-bert) (licence apache-2.0)" in text
    )
    conversion = json.loads((main / "conversion.json").read_text())
    layer = conversion["layers"][0]
    assert f"layer 0 {layer['copy_error']:.3f} → {layer['fit_error']:.3f}" in text
    summary = json.loads((main / "training_summary.json").read_text())
    assert f"Distillation (`symbert-pretrain --init_from ... --teacher ...`): {summary['steps']:,} steps" in text
    assert "steps on local files: train.txt" in text and "`sentiment` (MIT)" in text  # distillation, fine-tuning data
    header = next(line for line in text.splitlines() if line.startswith("| task |"))
    assert "| the teacher (%) | pairwise from scratch (%) | majority / chance (%) |" in header
    row = next(line for line in text.splitlines() if line.startswith("| UCI Sentiment |"))
    assert "| 91.00 ± 1.00 | 3 | 92.50 ± 0.50 | 62.00 ± 2.00 | 51.67 / 50.00 |" in row
    assert "## Made from someone/tiny-sentence-bert" in text
    assert "fill-mask" not in text.split("## Usage")[1].split("##")[0]  # its MLM head was never trained
    assert "SentenceTransformer(" in text and "/home/someone" not in text


@pytest.mark.parametrize(
    "baseline, message",
    [
        (dict(learning_rate=2e-5), "was scored with protocol.learning_rate=2e-05"),
        (dict(data_sha="cd" * 32), "scored uci_sentiment on other data than"),
    ],
)
def test_a_baseline_not_fine_tuned_identically_is_refused(distilled, tmp_path, baseline, message, capsys):
    data_sha = baseline.pop("data_sha", "ab" * 32)
    other = uci_results(tmp_path / "other.json", distilled.teacher, [92.0, 92.5, 93.0], data_sha, **baseline)
    argv = [*distilled.argv[:-2], "--output_dir", str(tmp_path / "staged"), "--baselines", f"other={other}"]
    assert_one_line(release.main, argv, message, capsys)
    assert not (tmp_path / "staged").exists()


def test_no_staged_file_holds_a_local_path(distilled):
    """The run's records hold the paths it ran with (the teacher's, --init_from's, --data_dir's): staged, each is
    its last part only."""
    for stage in distilled.stages:
        for path in stage.folder.rglob("*"):
            if path.is_file() and path.suffix in (".json", ".md", ".yaml", ".csv"):
                text = path.read_text()
                assert str(distilled.root) not in text and "/home/someone" not in text, path
    results = json.loads((distilled.stages[0].folder / "glue_results.json").read_text())
    assert results["protocol"]["data"] == "data" and results["model"]["name_or_path"] == "run"
    summary = json.loads((distilled.stages[0].folder / "training_summary.json").read_text())
    assert summary["model_arguments"]["teacher"] == "st-bert"


def test_validation_refuses_a_staged_file_with_a_local_path(distilled, tmp_path):
    from symbert.hub_cards import validation

    stage = distilled.stages[0]
    notes = stage.folder / "conversion.json"
    original = notes.read_text()
    try:
        notes.write_text(original.replace('"calibration.txt"', '"/home/someone/calibration.txt"'))
        problems = validation.check_local_paths(stage)
    finally:
        notes.write_text(original)
    assert len(problems) == 1 and problems[0].startswith("conversion.json holds a local path")
    assert validation.check_local_paths(stage) == []


def test_a_model_without_results_is_refused_unless_released_without_them(distilled, tmp_path, capsys):
    argv = [str(distilled.run), "--namespace", "symbert-test", "--name_template", "st-{attention_type}"]
    argv += ["--output_dir", str(tmp_path / "staged")]
    assert_one_line(release.main, argv, "Or release it with --without_results.", capsys)
    assert not (tmp_path / "staged").exists()
    (stage, _) = release.release_command([*argv, "--without_results"])
    text = (stage.folder / "README.md").read_text()
    assert "No downstream score was measured for this model" in text and "glue_results.json" not in text
    assert not (stage.folder / "glue_results.json").exists()
