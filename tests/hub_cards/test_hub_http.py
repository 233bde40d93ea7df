"""A staged release loads over HTTP as users load it: `from_pretrained("org/repo", revision=..., trust_remote_code=True)`
asks the Hub API for the revision's commit and downloads config, code, weights and tokenizer through
`{endpoint}/{repo}/resolve/{commit}/{file}`, which loading a local folder never does.

The staged folders of a `symbert-release` dry run are committed to a Git repository as `--push` leaves them on the Hub
(`main` with the weights in Git LFS, the tag on main's commit, a `step-N` branch and the `bert` branch, the plain BERT
export, each from main's commit with main's files it lacks deleted) and served on
127.0.0.1 by olah, a Hub mirror from PyPI (the `hub-server` extra) that answers the Hub's read API from local Git
repositories in offline mode, so no Hub server is written here: only one wrong answer of olah's is fixed (see OLAH).
Unlike the Hub, olah serves LFS files without a redirect and gives their sha256 as the ETag itself rather than as
X-Linked-Etag; huggingface_hub caches them under that sha256 either way. A fresh Python process that cannot import this
project then loads every head and the tokenizer of each revision with HF_ENDPOINT pointing at the mirror and a private
HF_HOME, and its outputs must match the staged weights loaded here; it loads `revision="bert"` with plain transformers,
without trust_remote_code, and its outputs must match the SymBERT model's. Runs in the default suite (about 25 s).
"""

import contextlib
import functools
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest
import torch
from huggingface_hub import scan_cache_dir
from transformers import AutoTokenizer

from helpers.integrations import WORDS
from helpers.models import HEADS
from helpers.release import NAMESPACE, fake_run, write_results
from symbert import SymBertForMaskedLM, SymBertModel
from symbert.hub_cards.release import release_command
from symbert.loading_symbert import BUNDLE_FILES
from symbert.tools import bert_export
from symbert.training.data.tokenizer import train_wordpiece

pytestmark = pytest.mark.heavy

pytest.importorskip(
    "olah", reason="needs the hub-server extra (olah, which needs huggingface_hub>=1.27: transformers 5 only)"
)

REPO_ID = f"{NAMESPACE}/symbert-tiny-original"
TAG = "v0.1.0"  # symbert-release's default --tag
REVISIONS = ["main", TAG, "step-1"]
PLAIN_REVISIONS = ["bert"]  # loaded without trust_remote_code: transformers' own BERT
TEXTS = [
    "the old man walked slowly along the [MASK] of the river.",
    "she [MASK] the road at night.",
    "a young woman walked to the city.",
    "the [MASK] light of the house.",
]  # four rows: two questions of two choices for AutoModelForMultipleChoice
# The Hub keeps these in Git LFS (its default .gitattributes), so the resolve answers carry their sha256 as ETag.
GITATTRIBUTES = "*.safetensors filter=lfs diff=lfs merge=lfs -text\n"


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """A dry run of a faked pre-training run whose checkpoint-1 has other weights than the final model."""
    root = tmp_path_factory.mktemp("hub-http")
    lines = [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(5 + i % 9)) + "." for i in range(120)]
    tokenizer = train_wordpiece(lines, vocab_size=120)
    run = fake_run(root / "runs" / "tiny-original", tokenizer, marker=root / "unpickled")
    torch.manual_seed(1)
    SymBertForMaskedLM(SymBertForMaskedLM.config_class.from_pretrained(run)).save_pretrained(run / "checkpoint-1")
    write_results(run, root / "glue" / "glue_results.json")
    with contextlib.redirect_stdout(io.StringIO()):
        stages = release_command(
            [
                str(run),
                "--results",
                str(root / "glue"),
                "--namespace",
                NAMESPACE,
                "--checkpoints",
                "1",
                "--tag",
                TAG,
                "--output_dir",
                str(root / "staged"),
            ]
        )
    folders = {stage.revision: stage.folder for stage in stages}
    assert [stage.repo_id for stage in stages] == [REPO_ID] * 3 and sorted(folders) == ["bert", "main", "step-1"]
    folders[TAG] = folders["main"]  # the tag names main's commit
    return SimpleNamespace(root=root, folders=folders)


def git(repository, *arguments):
    environment = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "symbert-release",
        "GIT_AUTHOR_EMAIL": "release@example.invalid",
        "GIT_COMMITTER_NAME": "symbert-release",
        "GIT_COMMITTER_EMAIL": "release@example.invalid",
    }
    result = subprocess.run(
        ["git", *arguments], cwd=repository, env=environment, capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def commit_folder(repository, folder, message):
    """Make the work tree hold exactly `folder`'s files (weights as Git LFS pointers, their content under .git/lfs as
    git-lfs keeps it) besides .gitattributes, commit, and return the commit's sha."""
    for path in repository.iterdir():
        if path.is_dir() and path.name != ".git":
            shutil.rmtree(path)
        elif path.is_file() and path.name != ".gitattributes":
            path.unlink()
    for source in sorted(p for p in folder.rglob("*") if p.is_file()):
        content, target = source.read_bytes(), repository / source.relative_to(folder)
        if source.suffix == ".safetensors":
            oid = hashlib.sha256(content).hexdigest()
            lfs_object = repository / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
            lfs_object.parent.mkdir(parents=True, exist_ok=True)
            lfs_object.write_bytes(content)
            content = f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(content)}\n".encode()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    git(repository, "add", "--all")
    git(repository, "commit", "--quiet", "--message", message)
    return git(repository, "rev-parse", "HEAD")


# olah's command (`olah-cli`) with one fix: olah 0.5.4 answers the tree listing of a folder that a local repository
# lacks by asking the upstream Hub, and offline with 401 RepoNotFound; the Hub answers 404 EntryNotFound, which is what
# AutoTokenizer's look-up of additional_chat_templates/ takes for "no templates" (a 401 fails the load).
OLAH = textwrap.dedent(
    """
    from olah import server
    from olah.errors import error_entry_not_found

    @server.app.middleware("http")
    async def missing_folder_is_not_found(request, call_next):
        response = await call_next(request)
        if response.status_code == 401 and request.url.path.startswith("/api/models/") and "/tree/" in request.url.path:
            return error_entry_not_found()
        return response

    server.cli()
    """
)


@pytest.fixture(scope="module")
def hub(staged):
    """The release as `symbert-release --push` leaves it on the Hub, served by olah on 127.0.0.1 (an ephemeral port)."""
    mirrors = staged.root / "mirrors"
    repository = mirrors / "models" / REPO_ID  # olah's layout: <mirrors-path>/<repo type>/<org>/<name>
    repository.mkdir(parents=True)
    git(repository, "init", "--quiet", "--initial-branch", "main")
    (repository / ".gitattributes").write_text(GITATTRIBUTES)
    commits = {"main": commit_folder(repository, staged.folders["main"], "Release")}
    git(repository, "tag", TAG)
    git(repository, "checkout", "--quiet", "-b", "step-1")  # from main's commit, as symbert-release branches
    commits["step-1"] = commit_folder(repository, staged.folders["step-1"], "Checkpoint at step 1")
    git(repository, "checkout", "--quiet", "-b", "bert", "main")  # from main's commit too
    commits["bert"] = commit_folder(repository, staged.folders["bert"], "Plain BERT export")
    commits[TAG] = commits["main"]

    config = staged.root / "olah.toml"
    settings = {
        "host": "127.0.0.1",
        "port": 0,
        "repos-path": str(staged.root / "olah-cache"),
        "mirrors-path": [str(mirrors)],
    }
    config.write_text(
        "[basic]\n"
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
        + "[accessibility]\noffline = true\n"
    )
    log = staged.root / "olah.log"
    with open(log, "w") as output:
        server = subprocess.Popen(
            [sys.executable, "-c", OLAH, "--config", str(config), "--log-path", str(staged.root / "olah-logs")],
            cwd=staged.root,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not (address := re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", log.read_text())):
            assert server.poll() is None and time.monotonic() < deadline, (
                f"olah did not start:\n{log.read_text()[-3000:]}"
            )
            time.sleep(0.1)
        yield SimpleNamespace(endpoint=address.group(1), commits=commits, log=log)
    finally:
        server.terminate()
        server.wait(timeout=30)


# Runs in a fresh interpreter, in another directory, where `import symbert` fails: everything comes over HTTP.
FRESH_PROCESS = textwrap.dedent(
    """
    import json, sys
    sys.modules["symbert"] = None  # any import of symbert or symbert.* now raises ImportError
    import torch, transformers

    repo_id, revisions, heads, texts, output, plain_revisions = json.loads(sys.argv[1])
    report, tensors = {}, {}
    for revision in revisions:
        tokenizer = transformers.AutoTokenizer.from_pretrained(repo_id, revision=revision, trust_remote_code=True)
        inputs = dict(tokenizer(texts, padding=True, return_tensors="pt"))
        tensors[f"{revision}/input_ids"] = inputs["input_ids"]
        for head in heads:
            model, info = getattr(transformers, head).from_pretrained(
                repo_id, revision=revision, trust_remote_code=True, output_loading_info=True
            )
            batch = {k: v.view(2, 2, -1) for k, v in inputs.items()} if head == "AutoModelForMultipleChoice" else inputs
            with torch.no_grad():
                outputs = model.eval()(**batch, output_hidden_states=True)
            tensors[f"{revision}/{head}/hidden"] = outputs.hidden_states[-1]
            tensors[f"{revision}/{head}/first"] = outputs[0]
            tensors.update({f"{revision}/{head}/state/{k}": v for k, v in model.state_dict().items()})
            report[f"{revision}/{head}"] = {
                "class": type(model).__name__, "module": type(model).__module__, "missing": sorted(info["missing_keys"]),
            }
    for revision in plain_revisions:  # as a user of plain transformers loads them: no trust_remote_code
        tokenizer = transformers.AutoTokenizer.from_pretrained(repo_id, revision=revision)
        inputs = dict(tokenizer(texts, padding=True, return_tensors="pt"))
        tensors[f"{revision}/input_ids"] = inputs["input_ids"]
        model = transformers.AutoModelForMaskedLM.from_pretrained(repo_id, revision=revision)
        with torch.no_grad():
            outputs = model.eval()(**inputs, output_hidden_states=True)
        tensors[f"{revision}/logits"], tensors[f"{revision}/hidden"] = outputs.logits, outputs.hidden_states[-1]
        report[revision] = {
            "class": type(model).__name__, "module": type(model).__module__, "model_type": model.config.model_type,
        }
    report["symbert_modules"] = [m for m, module in sys.modules.items() if m.split(".")[0] == "symbert" and module]
    torch.save(tensors, f"{output}/tensors.pt")
    with open(f"{output}/report.json", "w") as file:
        json.dump(report, file)
    """
)


@pytest.fixture(scope="module")
def downloaded(staged, hub):
    elsewhere = staged.root / "elsewhere"
    elsewhere.mkdir()
    hub_variables = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_")  # offline mode, other caches and endpoints, tokens
    env = {k: v for k, v in os.environ.items() if not k.startswith(hub_variables) and not k.lower().endswith("_proxy")}
    env.update(
        HF_ENDPOINT=hub.endpoint, HF_HOME=str(elsewhere / "hf-home"), PYTHONPATH="", TOKENIZERS_PARALLELISM="false"
    )
    arguments = [REPO_ID, REVISIONS, list(HEADS), TEXTS, str(elsewhere), PLAIN_REVISIONS]
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, json.dumps(arguments)],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"{result.stderr[-3000:]}\nolah's log:\n{hub.log.read_text()[-2000:]}"
    report = json.loads((elsewhere / "report.json").read_text())
    return SimpleNamespace(
        report=report, tensors=torch.load(elsewhere / "tensors.pt", weights_only=True), home=elsewhere / "hf-home"
    )


def test_revisions_resolve_to_their_commits_and_files_come_over_http(staged, hub, downloaded):
    assert downloaded.report["symbert_modules"] == []  # the project was never imported: the code came from the Hub
    assert hub.commits["step-1"] != hub.commits["main"] == hub.commits[TAG]
    (repo,) = scan_cache_dir(downloaded.home / "hub").repos
    assert repo.repo_id == REPO_ID and repo.repo_type == "model"
    refs = {revision.commit_hash: set(revision.refs) for revision in repo.revisions}
    assert refs == {
        hub.commits["main"]: {"main", TAG},
        hub.commits["step-1"]: {"step-1"},
        hub.commits["bert"]: {"bert"},
    }
    for revision in repo.revisions:
        (ref,) = set(revision.refs) - {TAG}
        folder = staged.folders[ref]
        files = {file.file_path.relative_to(revision.snapshot_path).as_posix(): file for file in revision.files}
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(files)
        code = set(BUNDLE_FILES)
        assert code <= set(files) if ref != "bert" else not [name for name in files if name.endswith(".py")]
        for name, file in files.items():
            assert file.file_path.read_bytes() == (folder / name).read_bytes(), (revision.refs, name)
        weights = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
        assert files["model.safetensors"].blob_path.name == weights  # served from Git LFS, named by its sha256 ETag
    requests, step = hub.log.read_text(), hub.commits["step-1"]
    assert (
        f'"GET /api/models/{REPO_ID}/revision/step-1 HTTP/1.1" 200' in requests
    )  # the branch's commit, then its files
    assert (
        f'"HEAD /{REPO_ID}/resolve/{step}/modeling_symbert.py HTTP/1.1" 200' in requests
    )  # same blob as main's: no GET
    assert f'"GET /{REPO_ID}/resolve/{step}/model.safetensors HTTP/1.1" 200' in requests


@pytest.mark.parametrize("revision", REVISIONS + PLAIN_REVISIONS)
def test_tokenizer_over_http_encodes_as_the_staged_one(staged, downloaded, revision):
    local = AutoTokenizer.from_pretrained(staged.folders[revision], trust_remote_code=True)
    expected = local(TEXTS, padding=True, return_tensors="pt")["input_ids"]
    assert torch.equal(downloaded.tensors[f"{revision}/input_ids"], expected)
    assert local.mask_token_id in expected[0]  # the texts' [MASK] is the tokenizer's mask token


@functools.cache
def staged_outputs(folder):
    """(last hidden state, MLM logits) of the staged weights on TEXTS, loaded here with this project's classes."""
    inputs = AutoTokenizer.from_pretrained(folder)(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = SymBertModel.from_pretrained(folder).eval()(**inputs).last_hidden_state
        return hidden, SymBertForMaskedLM.from_pretrained(folder).eval()(**inputs).logits


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("revision", REVISIONS)
def test_every_head_over_http_matches_the_staged_weights(staged, hub, downloaded, revision, head):
    report, tensors = downloaded.report[f"{revision}/{head}"], downloaded.tensors
    assert report["class"] == HEADS[head].__name__
    # the code of this revision's commit: transformers_modules.<repo id, as transformers spells it>.<commit>.modeling_symbert
    assert report["module"].startswith("transformers_modules.")
    assert report["module"].split(".")[-2:] == [hub.commits[revision], "modeling_symbert"]

    folder = staged.folders[revision]
    local, info = HEADS[head].from_pretrained(folder, output_loading_info=True)
    assert report["missing"] == sorted(info["missing_keys"])  # only a new task head is missing from the file
    state = {
        k.removeprefix(f"{revision}/{head}/state/"): v
        for k, v in tensors.items()
        if k.startswith(f"{revision}/{head}/state/")
    }
    assert state.keys() == local.state_dict().keys()
    missing = set(info["missing_keys"])
    for name, tensor in local.state_dict().items():
        if name not in missing:
            assert torch.equal(state[name], tensor), name

    hidden, logits = staged_outputs(folder)
    assert torch.equal(tensors[f"{revision}/{head}/hidden"], hidden)  # the encoder ran the staged weights
    if head == "AutoModel":
        assert torch.equal(tensors[f"{revision}/{head}/first"], hidden)
    if head == "AutoModelForMaskedLM":
        assert torch.equal(tensors[f"{revision}/{head}/first"], logits)
        other = "main" if revision == "step-1" else "step-1"
        assert not torch.equal(tensors[f"{other}/{head}/first"], logits)  # each revision has its own weights


def test_bert_branch_loads_as_plain_bert_with_the_symbert_outputs(staged, hub, downloaded):
    """`from_pretrained(repo, revision="bert")` with plain transformers, no trust_remote_code, in a process that cannot
    import this project: transformers' own BertForMaskedLM, giving the SymBERT model's outputs on main."""
    assert downloaded.report["bert"] == {
        "class": "BertForMaskedLM",
        "module": "transformers.models.bert.modeling_bert",
        "model_type": "bert",
    }
    repository = staged.root / "mirrors" / "models" / REPO_ID
    assert git(repository, "rev-parse", "bert^") == hub.commits["main"]  # a branch from main's commit
    assert git(repository, "ls-tree", "--name-only", "bert").split() == sorted(
        [".gitattributes", *(p.name for p in staged.folders["bert"].iterdir())]
    )  # main's code, config, card and GLUE files are gone from it
    hidden, logits = staged_outputs(staged.folders["main"])  # the SymBERT model, loaded here with this project
    tensors = downloaded.tensors
    assert torch.equal(tensors["bert/input_ids"], tensors["main/input_ids"])
    for got, expected in ((tensors["bert/logits"], logits), (tensors["bert/hidden"], hidden)):
        assert bert_export.relative_difference({"x": expected}, {"x": got}) <= bert_export.BOUND
    assert f'"GET /api/models/{REPO_ID}/revision/bert HTTP/1.1" 200' in hub.log.read_text()
