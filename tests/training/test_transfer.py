"""symbert-transfer: a BERT to a distilled SymBERT folder in one command (conversion, the attention stage, the model
stage), the teacher's kind of model at the end (its pooler, classifier or MLM head), resumed where it stopped, and
bad input refused in one line."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from transformers import AutoTokenizer

from helpers.assertions import assert_one_line
from helpers.corpora import tiny_corpus, tiny_sentences
from helpers.tiny import bert_classifier, bert_teacher, sentence_embedding_bert, two_texts
from symbert import SymBertForMaskedLM, SymBertForSequenceClassification, SymBertModel
from symbert.training import pretrain, transfer


@pytest.fixture(scope="module")
def teachers(tmp_path_factory):
    root = tmp_path_factory.mktemp("transfer")
    corpus = tiny_corpus(root / "corpus", tiny_sentences(300, seed=4), vocab_size=120)
    tokenizer = AutoTokenizer.from_pretrained(corpus / "tokenizer")
    bert_teacher(root / "plain", tokenizer, seed=6)
    bert_classifier(root / "classifier", tokenizer)
    return {
        "root": root,
        "corpus": corpus,
        "sentence": sentence_embedding_bert(root / "sentence", tokenizer),
        "mlm": bert_teacher(root / "mlm", tokenizer, head=True),
        "classifier": root / "classifier",
    }


def in_process(monkeypatch):
    """The stages run in this process (pretrain.main), as the command runs them in a child: faster to test."""

    def run_stage(arguments, stage):
        pretrain.main([*arguments, "--disable_tqdm", "true"])

    monkeypatch.setattr(transfer, "run_stage", run_stage)


def transfer_args(teachers, teacher, output, *extra, steps=6):
    corpus = teachers["corpus"] / "train.txt"
    return [str(teachers[teacher]), str(output), "--attention_type", "shared", "--steps", str(steps),
            "--train_files", str(corpus), "--calibration_files", str(corpus), *extra]  # fmt: skip


@pytest.mark.heavy
def test_one_command_makes_a_distilled_sentence_embedding_model_with_every_file(teachers, tmp_path, monkeypatch):
    in_process(monkeypatch)
    output = tmp_path / "out"
    record = transfer.transfer(transfer_args(teachers, "sentence", output))
    cosine = record["held_out_mean_cosine"]
    assert set(cosine) == {"copy", "convert", "attention", "model", "final"}
    assert cosine["final"] == pytest.approx(cosine["model"]) and cosine["final"] > cosine["copy"]
    assert json.loads((output / "config.json").read_text())["architectures"] == ["SymBertModel"]
    for name in ("modules.json", "1_Pooling/config.json", "conversion.json", "tokenizer.json", "bert/config.json"):
        assert (output / name).is_file(), name
    assert record["plan"]["bert"] == "sentence"  # a local path by its name only
    # the conversion keeps BERT's attention output projection (every fit at α = 1): the stages start best from it
    assert record["plan"]["output_scale"] is False
    layers = json.loads((output / "stages" / "convert" / "conversion.json").read_text())["layers"]
    assert [layer["output_scale"] for layer in layers] == [1.0] * len(layers)
    # each training stage kept its checkpoints, and the final encoder is the model stage's
    assert list((output / "stages" / "attention").glob("checkpoint-*"))
    assert list((output / "stages" / "model").glob("checkpoint-*"))
    final = SymBertModel.from_pretrained(output)
    distilled = SymBertForMaskedLM.from_pretrained(output / "stages" / "model")
    assert torch.equal(final.encoder.layer[1].attention.self.shared.weight,
                       distilled.bert.encoder.layer[1].attention.self.shared.weight)  # fmt: skip
    # a rerun of the finished folder does nothing
    assert transfer.transfer(transfer_args(teachers, "sentence", output)) == record
    from sentence_transformers import SentenceTransformer

    embeddings = SentenceTransformer(str(output), trust_remote_code=True, device="cpu").encode(["a few words here"])
    assert abs(float((embeddings**2).sum()) - 1) < 1e-4  # the teacher's Normalize module is kept


@pytest.mark.heavy
@pytest.mark.parametrize("teacher, model_class", [("classifier", SymBertForSequenceClassification),
                                                  ("mlm", SymBertForMaskedLM)])  # fmt: skip
def test_the_result_is_the_teachers_kind_of_model_with_its_heads(teachers, tmp_path, teacher, model_class):
    """assemble(): the converted folder's class and heads (the teacher's), the distilled encoder."""
    from symbert.tools.convert import convert

    converted, distilled, output = tmp_path / "converted", tmp_path / "distilled", tmp_path / "out"
    convert([str(teachers[teacher]), str(converted), "--attention_type", "symmetric", "--held_out", "8",
             "--calibration_files", str(teachers["corpus"] / "train.txt")])  # fmt: skip
    trained = SymBertForMaskedLM.from_pretrained(converted)
    with torch.no_grad():  # a stand-in for the stages' training: every tensor moved
        for parameter in trained.parameters():
            parameter.add_(0.5)
    trained.save_pretrained(distilled)
    output.mkdir()
    transfer.assemble(converted, distilled, output)
    transfer.assemble(converted, distilled, output)  # again, as a rerun stopped while moving files in does
    final = model_class.from_pretrained(output)
    assert type(final) is model_class
    source = model_class.from_pretrained(converted)
    heads = {n: t for n, t in source.state_dict().items() if not n.startswith("bert.")}
    distilled_state = trained.state_dict()
    for name, tensor in final.state_dict().items():
        if name.startswith("bert.") and not name.startswith("bert.pooler."):
            assert torch.equal(tensor, distilled_state[name]), name  # the distilled encoder
        elif teacher == "classifier":
            expected = heads.get(name, source.state_dict()[name])
            assert torch.equal(tensor, expected), name  # the teacher's pooler and classifier
        else:
            assert torch.equal(tensor, distilled_state[name]), name  # the MLM head distilled toward the teacher's
    assert (output / "tokenizer.json").is_file() and (output / "conversion.json").is_file()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--attention_type", "nope"], "--attention_type 'nope' is unknown; allowed: original"),
        (["--minutes", "0"], "--minutes=0.0 must be a number of minutes above 0"),
        (["--minutes", "nan"], "--minutes=nan must be a number of minutes above 0"),
        (["--steps", "1"], "--steps=1 must be at least 2"),
        (["--attention_share", "1"], "--attention_share=1.0 must be at least 0 and below 1"),
        (["--seed", "-1"], "--seed=-1 must be a whole number from 0 to 4294967295"),
        (["--output_scale", "yes"], "argument --output_scale: invalid choice: 'yes'"),
        (["--train_files", "{missing}"], "--train_files '{missing}' is not a file"),
    ],
)
def test_bad_arguments_are_one_line(teachers, tmp_path, capsys, extra, message):
    argv = transfer_args(teachers, "sentence", tmp_path / "out", *extra)
    assert_one_line(transfer.main, argv, message, capsys, missing=tmp_path / "missing.txt")
    assert not (tmp_path / "out").exists()


def test_a_missing_bert_leaves_no_output_folder(teachers, tmp_path, capsys):
    argv = transfer_args(teachers, "sentence", tmp_path / "out")
    argv[0] = str(tmp_path / "no-such-bert")
    assert_one_line(transfer.main, argv, "does not exist", capsys)
    assert not (tmp_path / "out").exists()  # a rerun with the right path is not refused as another run's folder


def test_a_folder_of_another_run_or_of_other_things_is_refused(teachers, tmp_path, capsys):
    output = tmp_path / "out"
    output.mkdir()
    (output / "notes.txt").write_text("mine")
    assert_one_line(transfer.main, transfer_args(teachers, "sentence", output), "holds no transfer-plan.json", capsys)
    assert (output / "notes.txt").read_text() == "mine"
    started = tmp_path / "started"
    started.mkdir()
    plan = transfer.TransferPlan(
        bert=str(teachers["sentence"].resolve()), attention_type="pairwise", minutes=60.0, total_steps=6,
        attention_share=0.2, train_files=None, calibration_files=None,
    )  # fmt: skip
    transfer.save_plan(plan, started)
    assert_one_line(
        transfer.main,
        transfer_args(teachers, "sentence", started),
        "holds a run started with other settings: attention_type 'shared' (the run's 'pairwise')",
        capsys,
    )
    # a plan written before --seed and --output_scale existed ran with 42 and the scale: the same run goes on with
    # them, another seed is another run
    corpus = str((teachers["corpus"] / "train.txt").resolve())
    legacy = dict(vars(plan), attention_type="shared", train_files=[corpus], calibration_files=[corpus])
    del legacy["seed"], legacy["output_scale"]
    (started / transfer.PLAN_FILE).write_text(json.dumps(legacy))
    legacy_args = transfer_args(teachers, "sentence", started, "--output_scale", "true")
    resumed = transfer.the_plan(transfer.parse_command_line(legacy_args), started)
    # given --steps, a run records no minutes (versions before wrote --minutes' default, 60, beside them)
    assert resumed.seed == 42 and resumed.output_scale and resumed.total_steps == 6 and resumed.minutes is None
    assert_one_line(
        transfer.main, transfer_args(teachers, "sentence", started), "output_scale False (the run's True)", capsys
    )
    fresh = started.with_name("fresh")
    assert (
        transfer.the_plan(transfer.parse_command_line(transfer_args(teachers, "sentence", fresh)), fresh).minutes
        is None
    )
    assert_one_line(transfer.main, [*legacy_args, "--seed", "7"], "seed 7 (the run's 42)", capsys)
    (started / transfer.PLAN_FILE).write_text("{not json")
    assert_one_line(
        transfer.main, transfer_args(teachers, "sentence", started), "transfer-plan.json is damaged", capsys
    )


@pytest.mark.slow  # a stopped run in a subprocess
@pytest.mark.parametrize("stage", ["attention", "model"])
def test_a_transfer_killed_in_a_stage_goes_on_where_it_stopped(teachers, tmp_path, stage):
    output = tmp_path / "out"
    command = [sys.executable, "-m", "symbert.training.transfer", *transfer_args(teachers, "sentence", output,
               steps=40)]  # fmt: skip
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    child = subprocess.Popen(command, env=environment, start_new_session=True, stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not list((output / "stages" / stage).glob("checkpoint-*")):
        time.sleep(0.1)
    os.killpg(child.pid, signal.SIGKILL)  # a kill in the stage, after its first checkpoint
    child.wait()
    assert not (output / transfer.RECORD_FILE).exists()
    conversion = (output / "stages" / "convert" / "conversion.json").read_bytes()
    finished = subprocess.run(command, env=environment, capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert "Resuming from" in finished.stdout and "Stage 1 of 3" not in finished.stdout
    assert (output / "stages" / "convert" / "conversion.json").read_bytes() == conversion
    assert json.loads((output / transfer.RECORD_FILE).read_text())["held_out_mean_cosine"]["final"] > 0


def test_a_second_run_into_a_folder_in_use_is_refused(teachers, tmp_path, capsys):
    from filelock import FileLock

    output = tmp_path / "out"
    argv = transfer_args(teachers, "sentence", output)
    output.mkdir()
    with FileLock(output / transfer.LOCK_FILE):  # the first run, holding the folder
        assert_one_line(transfer.main, argv, "is in use by another symbert-transfer", capsys)
    assert [item.name for item in output.iterdir()] == [transfer.LOCK_FILE]


@pytest.mark.parametrize(
    "teacher_change, train_file, message",
    [
        ("auto_map", None, "names code of its own (auto_map: evil.EvilModel); a folder's code is never run"),
        ("tokenizer", None, "its tokenizer's ids reach 149, past its model's vocab_size 120"),
        ("relative_key", None, "has position_embedding_type 'relative_key': a SymBERT model has absolute position"),
        (None, b"", "is empty (0 bytes)"),
        (None, bytes(range(256)), "is not text: line 1 holds a NUL byte"),
    ],
    ids=["own-code", "another-tokenizer", "relative-positions", "empty-data", "binary-data"],
)
def test_a_bert_or_data_it_cannot_use_is_refused_before_anything_is_written(
    teachers, tmp_path, capsys, teacher_change, train_file, message
):
    teacher = tmp_path / "teacher"
    shutil.copytree(teachers["sentence"], teacher)
    if teacher_change == "auto_map":
        config = json.loads((teacher / "config.json").read_text())
        (teacher / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModel": "evil.EvilModel"}}))
        (teacher / "evil.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w')\n")
    elif teacher_change == "relative_key":  # the config alone: transformers 5's BERT reads no distance embedding
        config = json.loads((teacher / "config.json").read_text())
        (teacher / "config.json").write_text(json.dumps({**config, "position_embedding_type": "relative_key"}))
    elif teacher_change == "tokenizer":
        other = tiny_corpus(tmp_path / "other", tiny_sentences(300, seed=9), vocab_size=200)
        AutoTokenizer.from_pretrained(other / "tokenizer").save_pretrained(teacher)
    argv = transfer_args(teachers, "sentence", tmp_path / "out")
    argv[0] = str(teacher)
    if train_file is not None:
        (tmp_path / "data.txt").write_bytes(train_file)
        argv[argv.index("--train_files") + 1] = str(tmp_path / "data.txt")
    assert_one_line(transfer.main, argv, message, capsys)
    assert not (tmp_path / "out").exists() and not (tmp_path / "ran").exists()


@pytest.mark.heavy
@pytest.mark.parametrize(
    "attention_type, shape",
    [
        ("symmetric", dict(num_hidden_layers=1, num_attention_heads=4, hidden_size=64, intermediate_size=96)),
        ("shared", dict(num_hidden_layers=3, num_attention_heads=1, hidden_size=32, intermediate_size=64)),
        ("mhe_mul", dict(num_hidden_layers=2, num_attention_heads=8, hidden_size=64, intermediate_size=128)),
    ],
    ids=["symmetric-1x4x64", "shared-3x1x32", "mhe_mul-2x8x64"],
)
def test_teachers_of_every_shape_convert_and_distil(teachers, tmp_path, shape, attention_type):
    """Any BERT: a teacher of another depth, head count and width converts (never below the copy) and both stages'
    losses train only what they should."""
    from symbert.tools.convert import convert

    tokenizer = AutoTokenizer.from_pretrained(teachers["corpus"] / "tokenizer")
    teacher_folder = bert_teacher(tmp_path / "teacher", tokenizer, seed=7, **shape)
    report = convert([str(teacher_folder), str(tmp_path / "converted"), "--attention_type", attention_type,
                      "--held_out", "8", "--calibration_files", str(teachers["corpus"] / "train.txt")])  # fmt: skip
    assert report.held_out_mean_cosine.fit >= report.held_out_mean_cosine.copy - 1e-6
    assert len(report.layers) == shape["num_hidden_layers"]
    student = SymBertForMaskedLM.from_pretrained(tmp_path / "converted")
    teacher = transfer.load_teacher(str(teacher_folder), student.config)
    inputs = two_texts()
    for stage in ("attention", "model"):
        student.zero_grad()
        student.requires_grad_(True)
        if stage == "attention":
            pretrain.trainable_only_attention(student)
        loss = transfer.DistillationLoss(teacher, stage)(student, inputs)
        assert torch.isfinite(loss) and loss > 1e-6  # none of these shapes can be held exactly by its type
        loss.backward()
        moved = {name for name, p in student.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
        assert moved and (stage == "model" or all(".attention.self." in name for name in moved)), (stage, moved)


@pytest.mark.heavy
def test_a_teacher_stored_in_float16_is_distilled_in_float32(teachers, tmp_path, monkeypatch):
    """A BERT saved in float16 (as many published ones are): transformers 5 loads it as float16, and a student
    trained in float16 without autocast barely moves. The stages train float32 weights toward a float32 teacher, and
    the result holds them."""
    from safetensors import safe_open
    from transformers import BertModel

    in_process(monkeypatch)
    teacher_folder = tmp_path / "teacher16"
    BertModel.from_pretrained(teachers["root"] / "plain").half().save_pretrained(teacher_folder)
    AutoTokenizer.from_pretrained(teachers["root"] / "plain").save_pretrained(teacher_folder)
    teachers = {**teachers, "float16": teacher_folder}
    output = tmp_path / "out"
    record = transfer.transfer(transfer_args(teachers, "float16", output))
    for folder in (output / "stages" / "attention", output / "stages" / "model", output):
        with safe_open(folder / "model.safetensors", "pt") as weights:
            assert {weights.get_slice(name).get_dtype() for name in weights.keys()} == {"F32"}, folder
    student = SymBertForMaskedLM.from_pretrained(output / "stages" / "model")
    assert transfer.load_teacher(str(teacher_folder), student.config).dtype == torch.float32
    cosine = record["held_out_mean_cosine"]
    assert cosine["final"] == pytest.approx(cosine["model"]) and all(-1 <= value <= 1 for value in cosine.values())


@pytest.mark.parametrize(
    "module, message",
    [
        ({"type": "sentence_transformers.models.Pooling", "path": "../../victim"}, "the path '../../victim'"),
        ({"type": "sentence_transformers.models.Pooling", "path": "/tmp/victim"}, "the path '/tmp/victim'"),
        ({"type": "evil_mod.EvilModule", "path": ""}, "names the module 'evil_mod.EvilModule', code of its own"),
    ],
)
def test_a_teacher_whose_modules_leave_its_folder_or_bring_code_is_refused(teachers, tmp_path, capsys, module, message):
    """The files a BERT folder's modules.json names are copied into every output: never from outside it."""
    from symbert.tools import convert

    teacher = tmp_path / "teacher"
    shutil.copytree(teachers["sentence"], teacher)
    modules = json.loads((teacher / "modules.json").read_text())
    (teacher / "modules.json").write_text(json.dumps([modules[0], {"idx": 1, "name": "1", **module}]))
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "config.json").write_text("mine")
    argv = [str(teacher), str(tmp_path / "out"), "--attention_type", "symmetric", "--held_out", "8",
            "--calibration_files", str(teachers["corpus"] / "train.txt")]  # fmt: skip
    assert_one_line(convert.main, argv, message, capsys)
    assert (victim / "config.json").read_text() == "mine" and not (tmp_path / "out").exists()
