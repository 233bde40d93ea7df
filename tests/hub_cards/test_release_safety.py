"""What symbert-release refuses, on a faked symbert-pretrain output (no pre-training): it unpickles nothing and stages
no pickle, a repository name from training_summary.json never leaves --output_dir nor passes the dry run when the Hub
would refuse it, changed code in a staged folder fails validation, and an unreachable Hub is one line, exit 2."""

import dataclasses
import json
import os
import pickle
import random
import re
import shutil
import socket
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from huggingface_hub import HfApi
from safetensors.torch import load_file, save_file

from helpers.release import NAMESPACE, RecordingHfApi, bad_results, copy_run, release_args, tree, write_results
from symbert.cli import UserError
from symbert.hub_cards import plan, pushing, release, staging, validation
from symbert.hub_cards.plan import Stage
from symbert.hub_cards.release import release_command
from symbert.tools import bert_export
from symbert.training.glue import data as glue_data
from symbert.training.glue import scoring as glue_scoring
from symbert.training.glue.results import GlueResults


def pickles(folder):
    """Files under `folder` that are pickles by name or by content (a pickle header, or a torch.save zip)."""

    def pickled(path):
        content = path.read_bytes()
        return (
            path.suffix in (".bin", ".pt", ".pth", ".pkl", ".pickle")
            or (content[:1] == b"\x80" and path.suffix != ".safetensors")
            or (zipfile.is_zipfile(path) and any(n.endswith(".pkl") for n in zipfile.ZipFile(path).namelist()))
        )

    return [p.relative_to(folder).as_posix() for p in Path(folder).rglob("*") if p.is_file() and pickled(p)]


def test_dry_run_unpickles_nothing_and_stages_no_pickle(run, staged):
    assert [(s.repo_id, s.revision) for s in staged.stages] == [
        (f"{NAMESPACE}/symbert-tiny-original", "main"),
        (f"{NAMESPACE}/symbert-tiny-original", "bert"),
        (f"{NAMESPACE}/symbert-tiny-original", "step-1"),
    ]
    assert not run.marker.exists()  # training_args.bin (main and checkpoint) was never unpickled
    assert pickles(run.folder) and pickles(run.folder / "checkpoint-1")  # the run has them ...
    assert pickles(staged.output) == []  # ... the staged repositories have none, by name or content
    assert {"trainer_state.json", "training_summary.json"} <= set(
        os.listdir(staged.output / "symbert-tiny-original" / "main")
    )
    card = (staged.output / "symbert-tiny-original" / "main" / "README.md").read_text()
    # the training section comes from training_summary.json's "training_arguments" and "train_runtime"
    assert "| learning rate | 0.0005, 1 warm-up steps, then linear decay |" in card
    assert "| seed | 7 |" in card and "| precision | fp32 |" in card and "| training time | 1.11 h (4,000 s) |" in card
    assert "training_args.bin" not in card


def test_summary_without_training_arguments_is_refused(run, tmp_path, capsys):
    older = copy_run(run.folder, tmp_path / "older", training_arguments=None)
    output = tmp_path / "staged"
    with pytest.raises(
        UserError, match=r"older/training_summary.json lacks 'training_arguments': it is the output of an older"
    ):
        release_command(release_args(older, run, output))
    with pytest.raises(SystemExit) as exit:
        release.main(release_args(older, run, output))
    error = capsys.readouterr().err
    # one error line (a notice may come first where huggingface_hub lacks the .eval_results format)
    lines = [line for line in error.splitlines() if not line.startswith("notice: ")]
    assert exit.value.code == 2 and len(lines) == 1 and "Traceback" not in error
    assert error.endswith("pre-train again.\n") and f"{older}/training_summary.json lacks 'training_arguments'" in error
    no_seed = copy_run(run.folder, tmp_path / "no-seed")
    summary = json.loads((no_seed / "training_summary.json").read_text())
    del summary["training_arguments"]["seed"]
    (no_seed / "training_summary.json").write_text(json.dumps(summary))
    with pytest.raises(UserError, match=r"no-seed/training_summary.json lacks 'training_arguments.seed'"):
        release_command(release_args(no_seed, run, output))
    assert not output.exists() and not run.marker.exists()


@pytest.mark.parametrize("size", ["..", "a/../../b", "../main", "."])
def test_size_that_leaves_output_dir_is_refused_and_nothing_outside_changes(run, tmp_path, size):
    model = copy_run(run.folder, tmp_path / "model", size=size)
    work = tmp_path / "work"
    for folder in ("main", "b/main", "staged/main"):  # where "{size}" = ".." etc. would have staged (and deleted)
        (work / folder / "sub").mkdir(parents=True)
        (work / folder / "keep.txt").write_text(f"{folder}: not the release's")
        (work / folder / "sub" / "data.bin").write_bytes(os.urandom(64))
    before = tree(tmp_path)
    with pytest.raises(UserError) as error:
        release_command(release_args(model, run, work / "staged", "--name_template", "{size}"))
    message = str(error.value)
    assert f"size={size!r}" in message and "--name_template '{size}'" in message
    assert f"{model}/training_summary.json" in message and "which the Hub does not accept" in message
    assert tree(tmp_path) == before  # byte for byte, inside and outside --output_dir


def test_invalid_repository_id_is_refused_on_the_dry_run(run, tmp_path):
    output = tmp_path / "staged"
    for size, template, repo_id in [
        ("tiny model", "symbert-{size}", f"{NAMESPACE}/symbert-tiny model"),  # a space
        ("tiny--x", "{size}-{attention_type}", f"{NAMESPACE}/tiny--x-original"),  # "--"
        ("tiny" * 30, "{size}", f"{NAMESPACE}/{'tiny' * 30}"),  # longer than 96 characters
    ]:
        model = copy_run(run.folder, tmp_path / f"model-{len(repo_id)}", size=size)
        with pytest.raises(UserError) as error:
            release_command(release_args(model, run, output, "--name_template", template))
        message = str(error.value)
        assert f"gives the repository id {repo_id!r}, which the Hub does not accept" in message
        assert f"size={size!r}" in message and f"--name_template {template!r}" in message
    assert not output.exists()


def test_staging_folder_stays_inside_output_dir(tmp_path):
    output = tmp_path / "staged"
    staging = plan.Staging(output_dir=str(output), name_template="{size}")
    assert staging.folder(f"{NAMESPACE}/symbert-tiny", "step-1") == output / "symbert-tiny" / "step-1"
    outside = tmp_path / "outside"
    (outside / "main").mkdir(parents=True)
    (outside / "main" / "keep.txt").write_text("mine")
    output.mkdir()
    (output / "linked").symlink_to(outside)  # a repository folder that links out of --output_dir
    for repo_id, revision in [(f"{NAMESPACE}/..", "main"), (f"{NAMESPACE}/.", "x/.."), (f"{NAMESPACE}/linked", "main")]:
        with pytest.raises(
            UserError,
            match=r"\(from --name_template '\{size\}'\) would be staged in .*, which is not a folder inside --output_dir",
        ):
            staging.write(repo_id, revision, {}, {"README.md": "x"})
    (output / "mine" / "main").mkdir(parents=True)  # exists, but not staged by symbert-release
    (output / "mine" / "main" / "keep.txt").write_text("mine")
    with pytest.raises(
        UserError, match=r"mine/main' exists and was not staged by symbert-release \(no record of what it staged"
    ):
        staging.write(f"{NAMESPACE}/mine", "main", {}, {"README.md": "x"})
    assert tree(outside) == {"main/keep.txt": b"mine"} and tree(output / "mine") == {"main/keep.txt": b"mine"}


def test_a_staging_that_fails_leaves_the_staged_folder_as_it_was_and_nothing_beside_it(tmp_path):
    """A revision is built in a hidden folder beside its own and replaces it only when complete; a build that fails
    removes the hidden folder (it was left behind), says so in one line and keeps the revision staged before (here a
    file and a folder of one name make the build fail halfway)."""
    staging = plan.Staging(output_dir=str(tmp_path / "out"), name_template="{size}")
    folder = staging.write(f"{NAMESPACE}/symbert-tiny", "main", {}, {"README.md": "first"})
    source = tmp_path / "config.json"
    source.write_text("{}")
    with pytest.raises(
        UserError, match=r"^Cannot write the staged main of .*/symbert-tiny next to .*main': File exists"
    ):
        staging.write(f"{NAMESPACE}/symbert-tiny", "main", {"config.json": source}, {"config.json/x": "y"})
    assert tree(folder) == {"README.md": b"first"}
    assert sorted(path.name for path in folder.parent.iterdir()) == [".main.staged.json", "main"]
    again = staging.write(f"{NAMESPACE}/symbert-tiny", "main", {"config.json": source}, {"README.md": "second"})
    assert again == folder and tree(folder) == {"README.md": b"second", "config.json": b"{}"}


@pytest.mark.heavy
def test_validation_refuses_changed_code_and_pickles(run, staged, tmp_path):
    main = staged.output / "symbert-tiny-original" / "main"
    folders = {name: shutil.copytree(main, tmp_path / name) for name in ("changed", "extra-code", "pickled")}
    modeling = folders["changed"] / "modeling_symbert.py"
    modeling.write_text(modeling.read_text() + "\nimport os  # not the project's code\n")
    (folders["extra-code"] / "helpers.py").write_text("print('hello')\n")
    (folders["pickled"] / "training_args.bin").write_bytes(pickle.dumps({"lr": 1e-3}))
    (folders["pickled"] / "logs").mkdir()
    (folders["pickled"] / "logs" / "state.json").write_bytes(pickle.dumps([1, 2]))  # a pickle by content
    # the provenance records the staged code; here it agrees, so the code check alone must catch the change
    provenance = json.loads((folders["changed"] / "provenance.json").read_text())
    provenance["code_sha256"]["modeling_symbert.py"] = plan.sha256(modeling)
    (folders["changed"] / "provenance.json").write_text(json.dumps(provenance))
    main_stage = staged.stages[0]
    stages = [
        Stage(main_stage.repo_id, "main", folder, run.folder, main_stage.eval_results, main_stage.eval_entries)
        for folder in folders.values()
    ]
    with pytest.raises(UserError) as error:
        validation.validate(stages)
    message = str(error.value)
    project = staging.code_files()["modeling_symbert.py"]
    assert f"{folders['changed']}:\n  - modeling_symbert.py differs from the project's {project}" in message
    assert (
        f"{folders['extra-code']}:\n  - provenance.json's weights, tokenizer or code sha256 does not match" in message
    )
    assert (
        "helpers.py is not one of the project's code files (attention_symbert.py, configuration_symbert.py, "
        "conversion_symbert.py, loading_symbert.py, modeling_symbert.py)" in message
    )
    assert "training_args.bin is a pickle, which a release never holds" in message
    assert "logs/state.json is a pickle, which a release never holds" in message
    assert message.count("so it was not loaded, nor its code run") == 3
    validation.validate(staged.stages)  # the untouched staged folders pass


@pytest.mark.heavy
def test_validation_refuses_a_changed_config(run, staged, tmp_path):
    """The staged config.json must hold what staging wrote (the source's, copied): a key added (which loads and gives
    the same logits, so only this check sees it), changed (auto_map pointing at code elsewhere) or removed is refused,
    named, and such a folder is not loaded. provenance.json records no config hash, so nothing else notices."""
    main_stage = staged.stages[0]
    assert main_stage.config == json.loads((run.folder / "config.json").read_text())  # what staging meant to write
    edits = {
        "added": lambda config: {**config, "trust_me": True},
        "changed": lambda config: {
            **config,
            "auto_map": {**config["auto_map"], "AutoModel": "someone/else--modeling_evil.Model"},
            "num_hidden_layers": float(config["num_hidden_layers"]),  # 2.0: equal to 2, yet not what was staged
        },
        "removed": lambda config: {key: value for key, value in config.items() if key != "attention_type"},
        "not-json": None,
    }
    folders = {}
    for name, edit in edits.items():
        folders[name] = shutil.copytree(main_stage.folder, tmp_path / name)
        config = folders[name] / "config.json"
        config.write_text("{not json" if edit is None else json.dumps(edit(json.loads(config.read_text()))))
    stages = [
        Stage(main_stage.repo_id, "main", folder, run.folder, main_stage.eval_results, main_stage.eval_entries)
        for folder in folders.values()
    ]
    with pytest.raises(UserError) as error:
        validation.validate(stages)
    message = str(error.value)
    source = run.folder / "config.json"
    assert (
        f"{folders['added']}:\n  - config.json is not the one staged from {source}: added key(s) trust_me\n" in message
    )
    assert (
        f"{folders['changed']}:\n  - config.json is not the one staged from {source}: changed key(s) auto_map.AutoModel "
        "('modeling_symbert.SymBertModel' -> 'someone/else--modeling_evil.Model'), num_hidden_layers (2 -> 2.0)\n"
    ) in message
    removed = (
        f"{folders['removed']}:\n  - config.json is not the one staged from {source}: removed key(s) attention_type\n"
    )
    assert removed in message
    assert f"{folders['not-json']}:\n  - config.json is not valid JSON (Expecting property name" in message
    assert message.count("so it was not loaded, nor its code run") == 4
    # the stage's own record of what it wrote is what counts: a config staging meant to change passes
    intended = {**main_stage.config, "trust_me": True}
    validation.validate([dataclasses.replace(main_stage, folder=folders["added"], config=intended)])
    validation.validate(staged.stages)  # the untouched staged folders (main and step-1) pass


@pytest.mark.heavy
def test_validation_refuses_a_bert_export_that_is_not_main_as_plain_bert(run, staged, tmp_path):
    """The `bert` stage: one weight changed (its provenance updated to match, so only the fresh process's outputs on
    the fixed batch can tell), main's code added, an auto_map added; the last two are not loaded at all."""
    bert_stage = next(stage for stage in staged.stages if stage.revision == "bert")
    main = staged.output / "symbert-tiny-original" / "main"
    folders = {name: shutil.copytree(bert_stage.folder, tmp_path / name) for name in ("tampered", "code", "auto-map")}
    weights = load_file(folders["tampered"] / "model.safetensors")
    weights["bert.encoder.layer.0.attention.self.query.weight"][0, 0] += 0.5  # one number of one tensor
    save_file(weights, folders["tampered"] / "model.safetensors", metadata={"format": "pt"})
    provenance = json.loads((folders["tampered"] / "provenance.json").read_text())
    provenance["weights_sha256"] = plan.sha256(folders["tampered"] / "model.safetensors")
    (folders["tampered"] / "provenance.json").write_text(json.dumps(provenance))
    shutil.copyfile(main / "modeling_symbert.py", folders["code"] / "modeling_symbert.py")
    config = json.loads((folders["auto-map"] / "config.json").read_text())
    auto_map = json.loads((main / "config.json").read_text())["auto_map"]
    (folders["auto-map"] / "config.json").write_text(json.dumps({**config, "auto_map": auto_map}))
    stages = [dataclasses.replace(bert_stage, folder=folder) for folder in folders.values()]
    with pytest.raises(UserError) as error:
        validation.validate(stages)
    message = str(error.value)
    tampered = message[message.index(f"{folders['tampered']}:") : message.index(f"{folders['code']}:")]
    # the outputs alone: it loads as plain BERT and its files check out, but its outputs, and so the figure its
    # provenance records (measured again in float64), are not the export's
    assert tampered.count("\n  - ") == 2
    assert re.search(
        rf"  - its outputs differ from those of {re.escape(str(run.folder))} by \d\.\d\de-0\d \(relative\) on the fixed "
        r"batch, above 1e-05\n  - provenance.json's bert_export.max_relative_difference=\S+ is not what the export "
        r"measures \(\d\.\d\de-0\d, float64 on the fixed batch, as symbert-to-bert measures it\)\n",
        tampered,
    )
    assert f"{folders['code']}:\n  - provenance.json's weights, tokenizer or code sha256 does not match" in message
    assert "  - modeling_symbert.py is code, which the plain BERT export never holds\n" in message
    assert "  - modeling_symbert.py was not staged by the release (not in its manifest of staged files)\n" in message
    assert (
        f"{folders['auto-map']}:\n  - config.json is not the one staged from {run.folder}/config.json: added key(s) auto_map"
        in message
    )
    assert "  - config.json has an auto_map: the plain BERT export loads without remote code\n" in message
    assert message.count("so it was not loaded, nor its code run") == 2


def test_an_export_off_its_bound_stops_the_release_before_anything_is_pushed(run, tmp_path, monkeypatch):
    monkeypatch.setattr(bert_export, "BOUND", -1.0)  # no export can pass: as one that differs from its model
    monkeypatch.setenv("HF_TOKEN", "hf_notARealToken")
    api = RecordingHfApi()
    monkeypatch.setattr(release, "HfApi", api)
    monkeypatch.setattr(release.constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(
        UserError,
        match=r"The BERT export of '.*tiny-original' differs from it by .*; nothing was written. The release stops here: "
        "nothing was pushed.$",
    ):
        release_command(release_args(run.folder, run, tmp_path / "staged", "--push"))
    assert api.calls == [] and not (tmp_path / "staged").exists()


def test_push_that_stops_part_way_says_what_was_pushed(staged):
    class LosesTheNetwork(RecordingHfApi):
        def create_commit(self, *args, **kwargs):
            raise ConnectionError("[Errno 101] Network is unreachable")

    args = SimpleNamespace(force=False, tag="v0.1.0", private=False, collection=None, namespace=NAMESPACE)
    with pytest.raises(UserError) as error:
        pushing.push_or_explain(staged.stages, LosesTheNetwork(), args)
    assert str(error.value) == (
        f"cannot reach the Hugging Face Hub ({release.constants.ENDPOINT}: ConnectionError: [Errno 101] Network is "
        f"unreachable): pushed before it stopped: created {NAMESPACE}/symbert-tiny-original."
    )


def unused_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed on return: nothing listens there


def run_release(arguments, **env):
    environment = {
        k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT")
    }
    command = Path(sys.executable).with_name("symbert-release")
    return subprocess.run(
        [str(command), *arguments],
        env={**environment, "HF_TOKEN": "hf_notARealToken", **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.heavy
def test_push_without_a_reachable_hub_is_one_line(run, tmp_path):
    endpoint = f"http://127.0.0.1:{unused_port()}"
    result = run_release(release_args(run.folder, run, tmp_path / "staged", "--push"), HF_ENDPOINT=endpoint)
    last_line = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    # httpx's ConnectError (huggingface_hub 1.x and later) or requests' ConnectionError (0.x)
    assert re.match(
        rf"symbert-release: error: cannot reach the Hugging Face Hub \({re.escape(endpoint)}: Connect(ion)?Error: ",
        last_line,
    )
    assert last_line.endswith("): nothing was pushed.") and "Connection refused" in last_line
    assert "Validated 2 staged folders" in result.stdout  # main and its bert export: it got as far as pushing


def test_push_in_offline_mode_is_refused_before_staging(run, staged, tmp_path, monkeypatch):
    # huggingface_hub reads HF_HUB_OFFLINE=1 (or TRANSFORMERS_OFFLINE=1) when imported, into constants.HF_HUB_OFFLINE
    monkeypatch.setattr(release.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_TOKEN", "hf_notARealToken")
    with pytest.raises(UserError) as error:
        release_command(release_args(run.folder, run, tmp_path / "staged", "--push"))
    assert str(error.value) == (
        "--push needs the Hugging Face Hub, but offline mode is on (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set): "
        "unset it to push. Nothing was staged."
    )
    assert not (tmp_path / "staged").exists()
    # and should the Hub go offline between that check and the push, huggingface_hub's own refusal is one line too
    args = SimpleNamespace(force=False, tag="v0.1.0", private=False, collection=None, namespace=NAMESPACE)
    with pytest.raises(UserError) as error:
        pushing.push_or_explain(staged.stages, HfApi(token="hf_notARealToken"), args)
    # huggingface_hub 0.x reads offline mode once, so it tries the network and fails to connect instead
    hub = re.escape(release.constants.ENDPOINT)
    assert re.match(
        rf"cannot reach the Hugging Face Hub \({hub}: (OfflineModeIsEnabled: Cannot reach |ConnectionError: )",
        str(error.value),
    )
    assert str(error.value).endswith(": nothing was pushed.")


def set_score(results, name, seed, value):
    results["scores"][name][seed] = value


def test_values_the_card_would_show_are_checked(run, tmp_path, capsys):
    """Every value a card renders is checked before anything is staged: one line naming the file and the field."""
    output = tmp_path / "staged"
    for i, (change, message) in enumerate(
        [
            (lambda r: set_score(r, "sst2", "1", "85.7"), r"scores.sst2.1='85.7' is not a finite number in \[0, 100\]"),
            (lambda r: set_score(r, "rte", "2", 1e308), r"scores.rte.2=1e\+308 is not a finite number in \[0, 100\]"),
            (lambda r: set_score(r, "qnli", "3", -50.0), r"scores.qnli.3=-50.0 is not a finite number in \[0, 100\]"),
            (
                lambda r: set_score(r, "cola", "1", -101.0),
                r"scores.cola.1=-101.0 is not a finite number in \[-100, 100\]",
            ),
            (lambda r: set_score(r, "mrpc", "1", float("nan")), r"scores.mrpc.1=nan is not a finite number"),
            (
                lambda r: r["aggregates"]["tasks"]["rte"].update(mean=99.0),
                r"aggregates.tasks.rte.mean=99.0 is not what",
            ),
            (lambda r: r["aggregates"]["glue"].update(n_seeds=5), r"aggregates.glue.n_seeds=5 is not what its scores"),
            (lambda r: r["protocol"].update(learning_rate="1e-5"), r"protocol.learning_rate='1e-5' is not a finite"),
        ]
    ):
        path = bad_results(run, tmp_path / f"results-{i}", change)
        with pytest.raises(UserError, match=rf"^{re.escape(str(path))}: {message}"):
            release_command(
                [str(run.folder), "--results", str(path), "--namespace", NAMESPACE, "--output_dir", str(output)]
            )
    for i, (changes, message) in enumerate(
        [
            ({"size": None}, None),  # an empty name in the file itself: never "symbert--original"
            ({"steps": -1}, r"steps=-1 is not an integer >= 1"),
            ({"steps": "1"}, r"steps='1' is not an integer >= 1"),
            ({"parameters": 1.5}, r"parameters=1.5 is not an integer >= 1"),
            ({"final_eval_loss": float("inf")}, r"final_eval_loss=inf is not a finite number >= 0"),
            ({"global_batch_size": 8}, r"global_batch_size=8 is not per_device_train_batch_size × "),
        ]
    ):
        model = copy_run(run.folder, tmp_path / f"model-{i}", **changes)
        if message is None:  # (null is a model of --init_from's shape, released as "custom")
            summary = json.loads((model / "training_summary.json").read_text())
            (model / "training_summary.json").write_text(json.dumps({**summary, "size": " "}))
            message = r"size=' ' is not a non-empty string"
        with pytest.raises(UserError, match=rf"^{re.escape(str(model))}/training_summary.json: {message}"):
            release_command(release_args(model, run, output))
    with pytest.raises(SystemExit) as exit:
        release.main(release_args(model, run, output))
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("notice: ")]
    assert exit.value.code == 2 and len(lines) == 1 and "global_batch_size=8" in lines[0]
    model = shutil.copytree(run.folder, tmp_path / "model-log")
    state = json.loads((model / "checkpoint-1" / "trainer_state.json").read_text())
    state["log_history"][1]["eval_loss"] = float("nan")  # what the step-1 card would show
    (model / "checkpoint-1" / "trainer_state.json").write_text(json.dumps(state))
    with pytest.raises(
        UserError, match=r"checkpoint-1/trainer_state.json: log_history\[1\].eval_loss=nan is not a finite number >= 0"
    ):
        release_command(release_args(model, run, output, "--checkpoints", "1"))
    assert not output.exists()


def test_what_symbert_glue_writes_passes_the_value_checks(run, tmp_path):
    """The checks hold symbert-glue's own output (build_results, every task and seed, Matthews below 0) and
    refuse the same file with one aggregate changed."""
    rng = random.Random(0)
    runs = {}
    for task in glue_data.TASKS:
        metrics = {"accuracy": rng.random(), "f1": rng.random(), "matthews_correlation": -rng.random()}
        metrics |= {"pearson": rng.uniform(-1, 1), "spearmanr": rng.uniform(-1, 1)}
        metrics |= {f"accuracy_{split}": rng.random() for split in ("matched", "mismatched")}
        for seed in (1, 2):
            runs[(task, seed)] = {"metrics": metrics | {"accuracy": rng.random()}}
    model = {"name_or_path": str(run.folder), "weights_sha256": plan.sha256(run.folder / "model.safetensors")}
    results = GlueResults.build(model, {"epochs": 3, "learning_rate": 2e-5}, runs, list(glue_data.TASKS), [1, 2])
    assert results.scores["cola"]["1"] < 0 and results.glue["complete"]
    GlueResults.from_json(tmp_path / "glue_results.json", results.to_json())
    results.glue["std"] += 0.01
    with pytest.raises(UserError, match=r"glue_results.json: aggregates.glue.std=.* is not what its scores give"):
        GlueResults.from_json(tmp_path / "glue_results.json", results.to_json())


def test_the_chosen_results_file_is_named_with_the_rule(run, tmp_path, capsys):
    fuller, sweep = tmp_path / "glue" / "suite", tmp_path / "glue" / "sweep"
    write_results(run.folder, fuller / "glue_results.json")
    bad_results(run, sweep, lambda r: [r["scores"].pop(name) for name in ("cola", "sst2")])  # fewer runs
    sweep_results = json.loads((sweep / "glue_results.json").read_text())
    sweep_results["aggregates"] = glue_scoring.aggregate(sweep_results["scores"], sweep_results["protocol"]["seeds"])
    (sweep / "glue_results.json").write_text(json.dumps(sweep_results))
    arguments = [str(run.folder), "--results", str(tmp_path / "glue"), "--namespace", NAMESPACE]
    (plan_,) = plan.plan_models(release.parse_arguments([*arguments, "--output_dir", str(tmp_path / "staged")]))
    assert plan_.results_path == fuller / "glue_results.json"
    assert capsys.readouterr().out == (
        f"{run.folder}: GLUE results from {fuller}/glue_results.json (its weights_sha256 is that of "
        f"{run.folder}/model.safetensors; it has the most runs (27) of the 2 that match: also "
        f"{sweep}/glue_results.json (21)).\n"
    )
    with pytest.raises(SystemExit):
        release.main(["--help"])
    assert "of several, the one with the most runs (seeds × scores); a tie is refused" in " ".join(
        capsys.readouterr().out.split()
    )


def test_links_in_what_is_staged_are_refused(run, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("hf_notForTheRelease")
    output = tmp_path / "staged"
    model = copy_run(run.folder, tmp_path / "model")
    (model / "metrics.csv").unlink()
    (model / "metrics.csv").symlink_to(secret)
    with pytest.raises(UserError, match=rf"^{re.escape(str(model))}/metrics.csv is a symbolic link \(to '{secret}'\)"):
        release_command(release_args(model, run, output))
    glue = shutil.copytree(run.glue, tmp_path / "glue")
    (glue / "glue_results.json").rename(tmp_path / "elsewhere.json")
    (glue / "glue_results.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(UserError, match=r"glue/glue_results.json is a symbolic link"):
        release_command(
            [str(run.folder), "--results", str(glue), "--namespace", NAMESPACE, "--output_dir", str(output)]
        )
    assert not output.exists()
    with pytest.raises(
        UserError, match=r"model/metrics.csv \(staged as metrics.csv\) is a symbolic link or not a regular file"
    ):
        plan.Staging(str(output), "{size}").write(f"{NAMESPACE}/x", "main", {"metrics.csv": model / "metrics.csv"}, {})
    assert not output.exists()


def test_validation_refuses_files_the_release_did_not_stage(staged, tmp_path):
    main_stage = staged.stages[0]
    assert all(validation.check_manifest(stage) == [] for stage in staged.stages)  # each folder is its manifest
    assert main_stage.files >= {"README.md", "glue_results.json", "provenance.json", "model.safetensors"}
    folder = shutil.copytree(main_stage.folder, tmp_path / "main")
    (folder / "notes.txt").write_text("added after staging")
    (folder / ".eval_results").mkdir(exist_ok=True)  # staged where huggingface_hub has EvalResultEntry
    (folder / ".eval_results" / "other.yaml").write_text("- added: after staging\n")
    (folder / "linked.txt").symlink_to("/etc/hostname")
    os.mkfifo(folder / "pipe")
    (folder / "README.md").unlink()
    os.mkfifo(folder / "README.md")  # a card that would hang whoever opens it
    (folder / "metrics.csv").unlink()
    with pytest.raises(UserError) as error:
        validation.validate([dataclasses.replace(main_stage, folder=folder)])
    assert str(error.value) == (
        f"Validation failed; nothing was pushed.\n{folder}:\n"
        "  - README.md is not a regular file (a named pipe, socket or device)\n"
        "  - linked.txt is a symbolic link (to '/etc/hostname'), which a release never holds\n"
        "  - pipe is not a regular file (a named pipe, socket or device)\n"
        "  - metrics.csv was staged but is missing\n"
        "  - .eval_results/other.yaml was not staged by the release (not in its manifest of staged files)\n"
        "  - notes.txt was not staged by the release (not in its manifest of staged files)\n"
        "  - so it was not loaded, nor its code run"
    )


def test_a_named_pipe_or_deeply_nested_results_file_is_one_line(run, tmp_path, capsys):
    """Neither opened (a named pipe would block the release for ever) nor parsed into a RecursionError."""
    output, pipe = tmp_path / "staged", tmp_path / "pipe" / "glue_results.json"
    pipe.parent.mkdir()
    os.mkfifo(pipe)
    with pytest.raises(UserError, match=rf"^{re.escape(str(pipe))} is not a regular file \(a named pipe"):
        release_command(
            [str(run.folder), "--results", str(pipe), "--namespace", NAMESPACE, "--output_dir", str(output)]
        )
    with pytest.raises(UserError, match=r"pipe/glue_results.json is not a regular file"):  # found under a folder
        release_command([str(run.folder), "--results", str(pipe.parent), "--namespace", NAMESPACE])
    model = copy_run(run.folder, tmp_path / "model")
    (model / "training_summary.json").unlink()
    os.mkfifo(model / "training_summary.json")
    with pytest.raises(UserError, match=r"model/training_summary.json is not a regular file"):
        release_command(release_args(model, run, output))
    model = copy_run(run.folder, tmp_path / "model-with-a-pipe")
    (model / "metrics.csv").unlink()
    os.mkfifo(model / "metrics.csv")  # staged as a file the card names: refused before staging, never opened
    with pytest.raises(UserError, match=r"model-with-a-pipe/metrics.csv is not a regular file \(a named pipe"):
        release_command(release_args(model, run, output))
    deep = tmp_path / "deep" / "glue_results.json"
    deep.parent.mkdir()
    deep.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(SystemExit) as exit:
        release.main([str(run.folder), "--results", str(deep), "--namespace", NAMESPACE, "--output_dir", str(output)])
    error = capsys.readouterr().err
    lines = [line for line in error.splitlines() if not line.startswith("notice: ")]
    assert exit.value.code == 2 and "Traceback" not in error
    assert [line.split(": ", 1)[1] for line in lines] == [
        f"error: {deep} is nested too deeply to be a JSON file the release reads."
    ]
    assert not output.exists()


def test_an_output_dir_inside_the_model_folder_is_never_read_as_input(run, staged, tmp_path, capsys):
    """`symbert-release model --output_dir model/release` a second time: the staged glue_results.json (the same
    weights, as many runs) and glue_vs_step.png under model/release are the release's output, not inputs."""
    model = copy_run(run.folder, tmp_path / "model")
    write_results(model, model / "glue_results.json")
    shutil.copytree(staged.output, model / "release")  # what the first run staged there
    main = model / "release" / "symbert-tiny-original" / "main"
    (main / "glue_vs_step.png").write_bytes(b"a staged plot")
    record = plan.Staging.record_path(main)  # as if that staging had written the plot
    record.write_text(
        json.dumps({**json.loads(record.read_text()), "glue_vs_step.png": plan.sha256(main / "glue_vs_step.png")})
    )
    output = str(model / "release")
    args = release.parse_arguments(
        [str(model), "--results", str(model), "--namespace", NAMESPACE, "--output_dir", output]
    )
    (plan_,) = plan.plan_models(args)
    assert plan_.results_path == model / "glue_results.json" and plan_.glue_plot is None
    assert f"GLUE results from {model}/glue_results.json (its weights_sha256 is that" in capsys.readouterr().out


@pytest.mark.parametrize("case", ["the model folder itself", "a link to the model folder"])
def test_a_release_into_the_model_folder_or_of_a_linked_one_is_refused(run, tmp_path, case):
    model = copy_run(run.folder, tmp_path / "model")
    before = sorted(path.name for path in model.iterdir())
    if case == "the model folder itself":
        arguments, message = release_args(model, run, model), f"--output_dir '{model}' is the model folder {model}"
    else:
        (tmp_path / "link").symlink_to(model)
        arguments, message = release_args(tmp_path / "link", run, tmp_path / "staged"), "link is a symbolic link"
    with pytest.raises(UserError, match=re.escape(message)):
        release_command(arguments)
    assert sorted(path.name for path in model.iterdir()) == before and not (tmp_path / "staged").exists()


def test_a_restaging_replaces_only_what_staging_wrote(run, staged, tmp_path):
    """An edited card, an added note or a planted provenance.json: a second staging refuses, naming the files,
    and deletes nothing; a staged folder that is a link is refused."""
    output = tmp_path / "staged"
    shutil.copytree(staged.output, output, symlinks=True)
    args = [str(run.folder), "--results", str(run.glue), "--namespace", NAMESPACE, "--output_dir", str(output)]
    main = output / "symbert-tiny-original" / "main"
    (main / "README.md").write_text((main / "README.md").read_text() + "\nmy edit\n")
    (main / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match=r"holds files changed or added since it was staged \(README.md, notes.txt\)"):
        release_command(args)
    assert "my edit" in (main / "README.md").read_text() and (main / "notes.txt").read_text() == "mine"
    mine = output / "symbert-tiny-original" / "bert"
    shutil.rmtree(mine)
    mine.mkdir()
    (mine / "provenance.json").write_text("{}")  # looks staged, is not
    (mine / "keep.txt").write_text("mine")
    plan.Staging.record_path(mine).unlink()
    (main / "notes.txt").unlink()
    (main / "README.md").write_text((staged.output / "symbert-tiny-original" / "main" / "README.md").read_text())
    with pytest.raises(UserError, match=r"bert' exists and was not staged by symbert-release"):
        release_command(args)
    assert (mine / "keep.txt").read_text() == "mine"
    shutil.rmtree(mine)
    (output / "symbert-tiny-original" / "elsewhere").mkdir()
    mine.symlink_to(output / "symbert-tiny-original" / "elsewhere")  # inside --output_dir, but a link
    with pytest.raises(UserError, match=r"bert' is a symbolic link or not a folder"):
        release_command(args)
