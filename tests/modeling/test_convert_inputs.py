"""What `symbert-convert` (and `symbert-pretrain --teacher`, which shares its check of a model folder) does with a bad
BERT folder, calibration text or output path: one line naming it, exit status 2, before anything is fitted, trained
or written; calibration text of any size read in bounded memory; the same text given twice read once; staging folders
of a killed run removed by the next; a Ctrl-C while a command imports ends in one line with exit status 130."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import safetensors
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, BertModel

from helpers.assertions import assert_one_line
from helpers.corpora import tiny_corpus, tiny_sentences
from helpers.tiny import bert_teacher
from symbert import SymBertConfig, SymBertModel, conversion_symbert, modeling_symbert
from symbert.cli import UserError
from symbert.tools import convert, staging_folder
from symbert.training.distillation import MATCHED_FIELDS, load_teacher

WEIGHTS = "model.safetensors"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A tiny BERT with its tokenizer, its weights also as a pytorch_model.bin (tensors only), and its corpus."""
    root = tmp_path_factory.mktemp("convert")
    corpus = tiny_corpus(root / "corpus", tiny_sentences(120, seed=4), vocab_size=120)
    bert = bert_teacher(root / "bert", AutoTokenizer.from_pretrained(corpus / "tokenizer"), seed=6)
    pickled = shutil.copytree(bert, root / "pickled")
    torch.save(load_file(pickled / WEIGHTS), pickled / "pytorch_model.bin")
    (pickled / WEIGHTS).unlink()
    return {"root": root, "bert": bert, "pickled": pickled, "text": corpus / "train.txt"}


def damaged(made, tmp_path, name):
    """A copy of the tiny BERT damaged as `name` says."""
    folder = shutil.copytree(made["pickled" if "bin" in name else "bert"], tmp_path / name)
    if name == "truncated safetensors":
        os.truncate(folder / WEIGHTS, 20_000)
    elif name == "truncated bin":
        os.truncate(folder / "pytorch_model.bin", 20_000)
    elif name == "NaN weight":
        weights = load_file(folder / WEIGHTS)
        weights["encoder.layer.1.attention.self.query.weight"][0, 0] = float("nan")
        save_file(weights, folder / WEIGHTS, metadata={"format": "pt"})
    elif name == "malformed card":
        (folder / "README.md").write_text("---\nlicense: [apache\n---\n# a model\n")
    elif name == "100,000 layers":
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 100_000}))
    return folder


FOLDER_FAULTS = {  # damage: what the line says
    "truncated safetensors": "model.safetensors: its weights cannot be read",
    "truncated bin": "pytorch_model.bin: its weights cannot be read",
    "NaN weight": "the tensor encoder.layer.1.attention.self.query.weight holds NaN or infinite values",
    "malformed card": "README.md: its metadata (the YAML block at the top) cannot be read",
    "100,000 layers": "num_hidden_layers=100000 disagrees with the weights",
}


@pytest.fixture
def no_fit(monkeypatch):
    """from_bert fails the test: a refusal must come before any model is made or fitted."""

    def refuse(*args, **kwargs):
        raise AssertionError("from_bert ran before the refusal")

    monkeypatch.setattr(modeling_symbert.SymBertPreTrainedModel, "from_bert", classmethod(refuse))


@pytest.mark.parametrize("fault", FOLDER_FAULTS)
def test_a_bert_folder_it_cannot_use_is_one_line_before_the_fit(made, tmp_path, capsys, no_fit, fault):
    """Truncated weights (safetensors or pickled) tracebacked; a NaN reached the fit's eigendecomposition (a LAPACK
    assert); a malformed card failed after the whole conversion; 100,000 layers built for minutes."""
    folder = damaged(made, tmp_path, fault)
    argv = [str(folder), str(tmp_path / "out"), "--attention_type", "symmetric", "--held_out", "8",
            "--calibration_files", str(made["text"])]  # fmt: skip
    assert_one_line(convert.main, argv, FOLDER_FAULTS[fault], capsys)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fault", FOLDER_FAULTS)
def test_a_teacher_it_cannot_use_is_one_line_before_it_is_loaded(made, tmp_path, monkeypatch, fault):
    """The same check, shared, for `symbert-pretrain --teacher` (truncated weights tracebacked from the loader)."""
    folder = damaged(made, tmp_path, fault)
    bert = json.loads((made["bert"] / "config.json").read_text())
    student = SymBertConfig(**{name: bert[name] for name in MATCHED_FIELDS}, intermediate_size=256)
    if fault == "100,000 layers":
        student.num_hidden_layers = 100_000  # the fields the student is matched on agree: the weights do not
    monkeypatch.setattr(BertModel, "from_pretrained", lambda *a, **k: pytest.fail("the teacher was loaded"))
    with pytest.raises(UserError) as refused:
        load_teacher(str(folder), student)
    assert FOLDER_FAULTS[fault] in str(refused.value)


def test_pickled_weights_convert_as_safetensors_do(made):
    """gqa reads BERT's key and value from the checkpoint to pool them: a pytorch_model.bin (read as tensors only)
    was looked for as model.safetensors."""
    models = []
    for folder in (made["bert"], made["pickled"]):
        torch.manual_seed(0)  # the pooler BERT lacks is new in both
        models.append(SymBertModel.from_bert(folder, attention_type="gqa", calibration_texts=None)[0])
    from_safetensors, from_pickle = models
    ours, theirs = from_safetensors.state_dict(), from_pickle.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[name], theirs[name]) for name in ours)


@pytest.mark.parametrize("kind", ["named pipe", "/dev/zero", "folder"])
def test_calibration_text_that_is_not_a_file_is_one_line(made, tmp_path, capsys, no_fit, kind):
    """A named pipe waited for a writer forever; /dev/zero was read until memory ran out."""
    path = {"named pipe": tmp_path / "pipe", "/dev/zero": "/dev/zero", "folder": tmp_path}[kind]
    if kind == "named pipe":
        os.mkfifo(path)
    argv = [str(made["bert"]), str(tmp_path / "out"), "--attention_type", "symmetric", "--calibration_files", str(path)]
    started = time.monotonic()
    assert_one_line(convert.main, argv, f"--calibration_files {str(path)!r} is not a regular file", capsys)
    assert time.monotonic() - started < 30 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("output", ["a file/out", "a file"])
def test_an_output_it_cannot_write_is_refused_before_the_work(made, tmp_path, capsys, no_fit, output):
    """An output under a file was refused only when the finished conversion was written."""
    (tmp_path / "a file").write_text("mine")
    argv = [str(made["bert"]), str(tmp_path / output), "--attention_type", "symmetric"]
    message = "lies inside" if "/" in output else "exists and is not an empty folder"
    assert_one_line(convert.main, argv, message, capsys)
    assert (tmp_path / "a file").read_text() == "mine"


def test_a_long_text_is_cut_before_it_is_tokenised_and_the_tokens_are_capped(made, monkeypatch):
    """One 50 MB line was tokenised whole (gigabytes), and every calibration token was kept for the fit (2.7 MB of
    text took 24 GB): each text is cut to CHARACTERS_PER_TOKEN characters a token first, and the sequences stop at
    MAX_CALIBRATION_TOKENS."""
    tokenizer = AutoTokenizer.from_pretrained(made["bert"])
    lengths = []
    tokenize = type(tokenizer).__call__

    def counting(self, text, *args, **kwargs):
        lengths.append(len(text))
        return tokenize(self, text, *args, **kwargs)

    monkeypatch.setattr(type(tokenizer), "__call__", counting)
    line = "the river walked slowly " * 2_000_000  # 48 MB
    (sequence,) = conversion_symbert.calibration_sequences(tokenizer, [line], max_length=32)
    assert lengths == [32 * conversion_symbert.CHARACTERS_PER_TOKEN] and sequence.shape == (1, 32)
    assert torch.equal(sequence, torch.tensor([tokenizer(line[:2048], truncation=True, max_length=32)["input_ids"]]))
    lengths.clear()
    sequences = conversion_symbert.calibration_sequences(tokenizer, [line] * 100, max_length=32, max_tokens=100)
    assert len(sequences) == 3 and len(lengths) == 4  # the fourth text is tokenised, found past the cap, dropped


@pytest.mark.heavy  # two conversions
def test_the_same_text_twice_is_read_once_and_the_fit_reads_at_most_the_cap(made, tmp_path, monkeypatch, capsys):
    """The same calibration file named twice put the "held-out" texts into the fit set; the fit's tokens are capped
    (with a notice) and conversion.json counts what was used; a killed run's staging folder is removed."""
    monkeypatch.setattr(conversion_symbert, "MAX_CALIBRATION_TOKENS", 600)
    stale = tmp_path / f".out.{dead_process()}-abcdefgh.convert.tmp"
    (stale / "weights").mkdir(parents=True)
    text = str(made["text"])
    convert.convert([str(made["bert"]), str(tmp_path / "out"), "--attention_type", "pairwise", "--held_out", "8",
                     "--calibration_files", text, text])  # fmt: skip
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "out" / "conversion.json").read_text())
    lines = [line.strip() for line in made["text"].read_text().splitlines() if line.strip()]
    assert "120 calibration line(s) given more than once" in printed
    assert f"the fit reads the first {report['fit_texts']} of the 112 calibration texts" in printed
    tokenizer = AutoTokenizer.from_pretrained(made["bert"])
    used = conversion_symbert.calibration_sequences(tokenizer, lines[: report["fit_texts"]], 64)
    assert (
        sum(s.shape[1] for s in used)
        <= 600
        < sum(s.shape[1] for s in used) + len(tokenizer(lines[len(used)]).input_ids)
    )
    assert report["held_out_texts"] == 8 and not stale.exists() and f"removed {stale}" in printed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def dead_process():
    """The id of a process that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("suffix", [".convert.tmp", ".to-bert.tmp"])
def test_staging_folders_of_a_killed_run_are_removed_and_others_kept_or_named(tmp_path, capsys, suffix):
    """A SIGKILL left a whole model under `.NAME.*.convert.tmp` (`.to-bert.tmp`) that no later run removed or named:
    the next run's staging removes those whose process is gone, keeps a running one's, and names one of an older
    version (no process id)."""
    gone = tmp_path / f".out.{dead_process()}-abcdefgh{suffix}"
    running = tmp_path / f".out.{os.getppid()}-ijklmnop{suffix}"
    older = tmp_path / f".out.qrstuvwx{suffix}"
    other = tmp_path / f".out2.{dead_process()}-abcdefgh{suffix}"
    for folder in (gone, running, older, other):
        (folder / "model.safetensors").parent.mkdir()
        (folder / "model.safetensors").write_bytes(b"x" * 100)
    staging = staging_folder(tmp_path / "out", suffix)
    printed = capsys.readouterr().out
    assert staging.name.startswith(f".out.{os.getpid()}-") and staging.name.endswith(suffix)
    assert not gone.exists() and running.exists() and older.exists() and other.exists()
    assert f"removed {gone}" in printed and f"{older} was left by an earlier, stopped run" in printed
    assert oct(staging.stat().st_mode & 0o777) == oct(0o777 & ~current_umask())


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.heavy  # fresh interpreters
@pytest.mark.parametrize("how", ["an import raises it", "SIGINT to the command"])
def test_ctrl_c_while_a_command_imports_is_one_line_and_status_130(tmp_path, how):
    """A Ctrl-C during the seconds a command spends importing torch and transformers printed a 60-line traceback."""
    env = {**os.environ, "SYMBERT_DEBUG": "0", "OMP_NUM_THREADS": "1"}
    if how == "an import raises it":
        (tmp_path / "stopped.py").write_text("raise KeyboardInterrupt\n")
        code = "import sys; sys.argv[0] = 'symbert-convert'; import symbert; import stopped"
        env["PYTHONPATH"] = str(tmp_path)
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        returncode, err = done.returncode, done.stderr
    else:
        command = shutil.which("symbert-convert") or pytest.skip("symbert-convert is not installed")
        child = subprocess.Popen(
            [command, "--help"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        time.sleep(0.3)  # imports take seconds
        child.send_signal(signal.SIGINT)
        err = child.communicate(timeout=300)[1]
        returncode = child.returncode
    assert returncode == 130 and err == "symbert-convert: interrupted\n", (returncode, err)


def tensor_reads(monkeypatch):
    """The files whose tensors are read, one entry per opening that reads any: every reader here (transformers'
    loader, safetensors' load_file, this project's) opens a safetensors file through `safe_open`."""
    reads, original = [], safetensors.safe_open

    class Opened:
        def __init__(self, path, *args, **kwargs):
            self.opened, self.path, self.counted = original(path, *args, **kwargs), Path(path).resolve(), False

        def __enter__(self):
            self.opened.__enter__()
            return self

        def __exit__(self, *error):
            return self.opened.__exit__(*error)

        def __getattr__(self, name):  # keys(), metadata(), ...: no tensor read
            return getattr(self.opened, name)

        def count(self):
            if not self.counted:
                self.counted = True
                reads.append(self.path)

        def get_tensor(self, name):
            self.count()
            return self.opened.get_tensor(name)

        def get_tensors(self):
            self.count()
            return self.opened.get_tensors()

        def get_slice(self, name):
            return Slice(self, self.opened.get_slice(name))

    class Slice:  # a header (dtype, shape) until indexed
        def __init__(self, opened, part):
            self.opened, self.part = opened, part

        def __getattr__(self, name):
            return getattr(self.part, name)

        def __getitem__(self, index):
            self.opened.count()
            return self.part[index]

    for module in list(sys.modules.values()):
        if getattr(module, "safe_open", None) is original:
            monkeypatch.setattr(module, "safe_open", Opened)
    return reads


@pytest.mark.heavy  # a conversion
def test_a_conversion_reads_the_berts_weights_once(made, tmp_path, monkeypatch):
    """symbert-convert reads BERT's weights once: the encoder it compares with, the copy, the fit, the BERT the fit
    is measured against and the tensors gqa converts are all made from what it read (it read them five times, seven
    for gqa, before)."""
    reads = tensor_reads(monkeypatch)
    convert.convert([str(made["bert"]), str(tmp_path / "out"), "--attention_type", "gqa", "--held_out", "8",
                     "--calibration_files", str(made["text"])])  # fmt: skip
    assert reads.count((made["bert"] / WEIGHTS).resolve()) == 1


@pytest.mark.heavy  # four conversions
def test_the_tensors_read_once_make_the_models_from_bert_makes_from_the_folder(made):
    """from_bert given BERT's tensors (state_dict) makes, under the same seed, the same copy and fit as from_bert
    reading them from the folder: the models symbert-convert writes do not change with the single read."""
    texts = convert.text_lines(made["text"])[:24]
    state = load_file(made["bert"] / WEIGHTS)
    made_models = []
    for bert_state in (None, state):
        torch.manual_seed(0)
        made_models.append(convert.copy_and_fit(str(made["bert"]), SymBertModel, "gqa", texts, bert_state))
    (copied, fitted, new_parameters), (copied_again, fitted_again, new_again) = made_models
    assert new_parameters == new_again and fitted.bert_fit_report == fitted_again.bert_fit_report
    for model, again in ((copied, copied_again), (fitted, fitted_again)):
        assert model.state_dict().keys() == again.state_dict().keys()
        assert all(torch.equal(tensor, again.state_dict()[name]) for name, tensor in model.state_dict().items())
    read_again = load_file(made["bert"] / WEIGHTS)  # the tensors given are left as they were
    assert all(torch.equal(tensor, read_again[name]) for name, tensor in state.items())


def test_the_cosine_of_equal_embeddings_is_one_never_more():
    """cosine_similarity of a row with itself can round to 1 + 2e-7; the conversion's record, which takes only
    cosines in [-1, 1], refused the agreement of a conversion that equals its BERT (a float16 teacher's)."""
    torch.manual_seed(0)
    rows = 3 * torch.randn(64, 384)
    assert (torch.nn.functional.cosine_similarity(rows, rows) > 1).any()  # what the clamp is for
    assert convert.embedding_cosine(rows, rows) == 1.0
    assert convert.embedding_cosine(rows, -rows) == -1.0
    half = rows.clone()
    half[:32] = -half[:32]
    assert convert.embedding_cosine(half, rows) == pytest.approx(0.0, abs=1e-6)
