"""What symbert-release's validation refuses beyond the schema, on the faked symbert-pretrain output of
test_release_safety.py: per-run metrics out of range or other than the scores, protocol values no run could have
used, a task or seed listed twice, HTML or Markdown from the inputs on a card, `bert` branch figures other than the
export measures, and a staged file deleted before the push. Each is one line (exit status 2), never a traceback."""

import dataclasses
import json
import re
import shutil

import pytest

from helpers.release import NAMESPACE, RecordingHfApi, bad_results, copy_run, release_args, write_results
from symbert.cli import UserError
from symbert.hub_cards import card as cards
from symbert.hub_cards import plan, release, validation
from symbert.hub_cards.release import release_command
from symbert.training.glue import data as glue_data
from symbert.training.glue import scoring as glue_scoring
from symbert.training.glue.results import GlueResults
from symbert.training.made_from import MadeFromRecord, Teacher


def refused_results(run, tmp_path, change, name="results"):  # noqa: F811
    """The refusal of a dry run given a results file changed by `change`; nothing is staged."""
    path = bad_results(run, tmp_path / name, change)
    output = tmp_path / "staged"
    with pytest.raises(UserError) as error:
        release_command(
            [str(run.folder), "--results", str(path), "--namespace", NAMESPACE, "--output_dir", str(output)]
        )
    assert not output.exists()
    return path, str(error.value)


def one_line_exit(arguments, capsys):
    """The error line and exit status of symbert-release's command line (notices aside)."""
    with pytest.raises(SystemExit) as exit:
        release.main(arguments)
    error = capsys.readouterr().err
    lines = [line for line in error.splitlines() if not line.startswith("notice: ")]
    assert "Traceback" not in error and len(lines) == 1, error
    return exit.value.code, lines[0]


def with_aggregates(change):
    """`change`, then the aggregates recomputed from the scores: only what `change` broke is wrong."""

    def changed(results):
        change(results)
        results["aggregates"] = glue_scoring.aggregate(results["scores"], results["protocol"]["seeds"])

    return changed


# a. Per-run metrics and what the card's columns show are the scores' own


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda r: r["runs"]["mrpc"]["1"].update(accuracy=2.0),
            "runs.mrpc.1.accuracy=2.0 is not a finite number in [0, 1].",
        ),
        (lambda r: r["runs"]["mrpc"]["2"].update(f1=-1), "runs.mrpc.2.f1=-1 is not a finite number in [0, 1]."),
        (
            lambda r: r["runs"].update(cola={"1": {"matthews_correlation": 1.5}}),
            "runs.cola.1.matthews_correlation=1.5 is not a finite number in [-1, 1].",
        ),
        (
            lambda r: r["runs"]["mrpc"]["3"].update(score=99.0),
            "runs.mrpc.3.score=99.0 is not what its scores give (82.1, as symbert-glue computes it).",
        ),
        (
            lambda r: r["runs"].update(nope={"1": {"accuracy": 0.5}}),
            "runs has 'nope', which is not a task of the task table (",
        ),
        (
            with_aggregates(lambda r: r["scores"]["rte"].update({"4": 60.0})),
            "scores.rte has seed(s) '4', which protocol.seeds ([1, 2, 3]) does not list: the card says which seeds",
        ),
        (
            lambda r: r["aggregates"]["glue"]["per_seed"].update({"2": 80.0}),
            "aggregates.glue.per_seed.2=80.0 is not what its scores give (",
        ),
    ],
)
def test_per_run_metrics_out_of_range_or_other_than_the_scores_are_refused(run, tmp_path, change, message):  # noqa: F811
    path, error = refused_results(run, tmp_path, change)
    assert error.startswith(f"{path}: {message}"), error


ALL_ZEROS = {"majority": 0.0, "chance": 0.0, "margin": 0.0, "did_not_learn": False}


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda r: r["runs"].update(sst2={"1": {"accuracy": 0.10}}),
            "scores.sst2.1=85.7 is not what runs.sst2.1's metrics give (10.0, as symbert-glue computes it)",
        ),
        (
            lambda r: r["runs"]["mrpc"]["2"].update(accuracy=0.10),
            "scores.mrpc.2=81.4 is not what runs.mrpc.2's metrics give (",
        ),
        (
            lambda r: r["runs"]["mrpc"].update({"7": r["runs"]["mrpc"]["1"]}),
            "runs.mrpc has seed(s) '7', which protocol.seeds ([1, 2, 3]) does not list",
        ),
        (
            lambda r: r["protocol"].update(tasks=["rte"]),
            "scores has 'cola', of the task 'cola', which protocol.tasks (['rte']) does not list",
        ),
        (
            lambda r: r["aggregates"]["tasks"]["sst2"].update(baseline=ALL_ZEROS),
            "aggregates.tasks.sst2.baseline.majority=0.0 is no dev set's baseline: labels with its majority and "
            "chance give 100",
        ),
        (
            lambda r: r["aggregates"]["tasks"]["sst2"].update(baseline={**ALL_ZEROS, "standard_error": 0.0, "n": 872}),
            "aggregates.tasks.sst2.baseline.majority=0.0 is no dev set's baseline: 872 labels",
        ),
        (
            lambda r: r["aggregates"]["tasks"]["mnli-m"].update(baseline={**ALL_ZEROS, "majority": 40.0}),
            "aggregates.tasks.mnli-m.baseline.chance=0.0 is no dev set's baseline: labels with its majority and "
            "chance give 33.3333",
        ),
    ],
    ids=["accuracy 0.10 beside 85.7", "F1 task", "seed outside the protocol", "one task of eight", "zero baselines",
         "zero baselines with n", "zero chance"],
)  # fmt: skip
def test_run_records_and_baselines_other_than_the_scores_give_are_refused(run, tmp_path, change, message):
    path, error = refused_results(run, tmp_path, change)
    assert error.startswith(f"{path}: {message}"), error


def test_a_baseline_verdict_other_than_its_numbers_give_is_refused(run, tmp_path, capsys):  # noqa: F811
    """The card's "majority / chance" and "against the baselines" columns: the verdict must follow from the mean,
    std and baselines the file holds (glue_scoring.learning_verdict), the baselines within the score's range."""
    baseline = glue_scoring.baseline_scores("rte", {"validation": [0] * 146 + [1] * 131})["rte"]  # RTE's dev set
    assert (round(baseline["majority"], 1), round(baseline["standard_error"], 1)) == (52.7, 3.0)

    def with_baseline(results, **changes):
        task = results["aggregates"]["tasks"]["rte"]
        task["baseline"] = {**glue_scoring.learning_verdict(task, baseline), **changes}

    assert glue_scoring.learning_verdict({"mean": 56.4, "std": 0.7}, baseline)["did_not_learn"] is True
    path, error = refused_results(run, tmp_path, lambda r: with_baseline(r, did_not_learn=False))
    assert error == (
        f"{path}: aggregates.tasks.rte.baseline.did_not_learn=False is not what its scores give (True, as "
        "symbert-glue computes it)."
    )
    path, error = refused_results(run, tmp_path, lambda r: with_baseline(r, majority=250.0), "majority")
    assert error == f"{path}: aggregates.tasks.rte.baseline.majority=250.0 is not a finite number in [0, 100]."
    code, line = one_line_exit(
        [str(run.folder), "--results", str(path), "--namespace", NAMESPACE, "--output_dir", str(tmp_path / "s")], capsys
    )
    assert code == 2 and line.endswith("baseline.majority=250.0 is not a finite number in [0, 100].")
    # a verdict recorded without its standard error (an older file): it must follow from the numbers the card shows
    older = {"majority": 52.7, "chance": 50.0, "margin": 1.0, "did_not_learn": True}  # 56.4 > 52.7 + 1.0: it learned
    path, error = refused_results(
        run, tmp_path, lambda r: r["aggregates"]["tasks"]["rte"].update(baseline=older), "older"
    )
    assert error.startswith(
        f"{path}: aggregates.tasks.rte.baseline.did_not_learn=True is not what its scores give (False"
    )


def test_what_symbert_glue_writes_passes_the_new_checks(run, tmp_path):  # noqa: F811
    """symbert-glue's own output (build_results: runs, baselines, every task and seed) passes."""
    runs = {}
    for i, task in enumerate(glue_data.TASKS):
        metrics = {"accuracy": 0.5 + i / 40, "f1": 0.6, "matthews_correlation": -0.1, "pearson": 0.3, "spearmanr": 0.2}
        metrics |= {"accuracy_matched": 0.7, "accuracy_mismatched": 0.71}
        labels = [0.5 * (i % 3) for i in range(100)] if task == "stsb" else [i % 2 for i in range(100)]
        baselines = glue_scoring.baseline_scores(task, dict.fromkeys(glue_data.TASKS[task].eval_splits, labels))
        for seed in (1, 2):
            runs[(task, seed)] = {
                "metrics": metrics | {"f1": 0.6 + seed / 100},
                "baselines": baselines,
                "data_sha256": "ab" * 32,
            }
    model = {"name_or_path": str(run.folder), "weights_sha256": plan.sha256(run.folder / "model.safetensors")}
    protocol = {
        "epochs": 3.0,
        "learning_rate": 2e-5,
        "lr_scheduler_type": "linear",
        "warmup_ratio": 0.1,
        "data": "/data/glue",
    }
    results = GlueResults.build(model, protocol, runs, list(glue_data.TASKS), [1, 2])
    assert results.task_aggregates["rte"]["baseline"] and results.runs["cola"]["1"]
    GlueResults.from_json(tmp_path / "glue_results.json", results.to_json())


# b. Protocol and training values no run could have used


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("learning_rate", -1e-05, "protocol.learning_rate=-1e-05 is not a finite number > 0."),
        ("learning_rate", 0, "protocol.learning_rate=0 is not a finite number > 0."),
        ("learning_rate", float("inf"), "protocol.learning_rate=inf is not a finite number (the paper's: 1e-05)."),
        ("epochs", -3, "protocol.epochs=-3 is not a finite number > 0."),
        ("per_device_train_batch_size", 0, "protocol.per_device_train_batch_size=0 is not an integer >= 1."),
        ("max_length", 12.5, "protocol.max_length=12.5 is not an integer >= 1."),
        ("warmup_ratio", 1.5, "protocol.warmup_ratio=1.5 is not a finite number >= 0 and <= 1."),
        ("weight_decay", -0.01, "protocol.weight_decay=-0.01 is not a finite number >= 0."),
        ("max_steps", -2, "protocol.max_steps=-2 is not an integer >= -1."),
    ],
)
def test_protocol_values_out_of_range_are_refused(run, tmp_path, key, value, message):  # noqa: F811
    path, error = refused_results(run, tmp_path, lambda r: r["protocol"].update({key: value}))
    assert error == f"{path}: {message}"


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("learning_rate", 0.0, "training_arguments.learning_rate=0.0 is not a finite number > 0."),
        ("learning_rate", -5e-4, "training_arguments.learning_rate=-0.0005 is not a finite number >= 0."),
        ("adam_epsilon", 0.0, "training_arguments.adam_epsilon=0.0 is not a finite number > 0."),
        ("adam_beta2", 1.0, "training_arguments.adam_beta2=1.0 is not a number >= 0 and < 1."),
    ],
)
def test_training_values_no_run_trained_with_are_refused(run, tmp_path, key, value, message):  # noqa: F811
    model = copy_run(run.folder, tmp_path / "model")
    summary = json.loads((model / "training_summary.json").read_text())
    summary["training_arguments"][key] = value
    (model / "training_summary.json").write_text(json.dumps(summary))
    with pytest.raises(UserError) as error:
        release_command(release_args(model, run, tmp_path / "staged"))
    assert str(error.value) == f"{model}/training_summary.json: {message}"
    assert not (tmp_path / "staged").exists()


# c. A task, seed, key or label listed twice


def test_a_task_or_seed_listed_twice_is_refused(run, tmp_path, capsys):  # noqa: F811
    tasks = ["cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte", "cola"]
    path, error = refused_results(run, tmp_path, lambda r: r["protocol"].update(tasks=tasks), "tasks")
    assert error == f"{path}: protocol.tasks={tasks!r} lists 'cola' twice; each task is listed once."
    path, error = refused_results(run, tmp_path, lambda r: r["protocol"].update(seeds=[1, 2, 3, 2]), "seeds")
    assert error == f"{path}: protocol.seeds=[1, 2, 3, 2] lists a seed twice; each seed is run once."
    path, error = refused_results(run, tmp_path, lambda r: r["protocol"].update(tasks=["cola", "<b>x</b>"]), "bad")
    assert error.startswith(f"{path}: protocol.tasks=['cola', '<b>x</b>'] is not a list of tasks of the task table")
    # the same task twice in one JSON object: Python's json would keep the second silently
    duplicate = tmp_path / "duplicate" / "glue_results.json"
    results = write_results(run.folder, duplicate)
    text = json.dumps(results, indent=2)
    sst2 = json.dumps({"sst2": {"1": 99.0, "2": 99.0, "3": 99.0}})[1:-1]
    duplicate.write_text(text.replace('"scores": {', '"scores": {' + sst2 + ",", 1))
    code, line = one_line_exit(
        [str(run.folder), "--results", str(duplicate), "--namespace", NAMESPACE, "--output_dir", str(tmp_path / "s")],
        capsys,
    )
    assert code == 2 and line.endswith(
        f"error: {duplicate}: the key 'sst2' is given 2 times in one JSON object; each key (a task, a seed, a field) "
        "is given once."
    )
    glue = str(run.glue / "glue_results.json")
    code, line = one_line_exit(
        [*release_args(run.folder, run, tmp_path / "s"), "--baselines", f"teacher={glue}", f"teacher ={glue}"], capsys
    )
    assert code == 2 and line.endswith(
        "error: --baselines gives the label 'teacher' twice; each baseline is listed once (see --help)"
    )
    assert not (tmp_path / "s").exists()


# d. HTML and Markdown from the inputs: refused where a name is expected, escaped where free text is


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda r: r["protocol"].update(data="<script>alert(1)</script>"),
            "protocol.data='<script>alert(1)</script>' is not plain text for a card: letters, digits, spaces and "
            ". , : ; / + = @ ~ ( ) ' - only.",
        ),
        (
            lambda r: r["protocol"].update(data="/data/glue`\n\n<img src=x onerror=alert(1)>"),
            "protocol.data='/data/glue`\\n\\n<img src=x onerror=alert(1)>' is not plain text for a card",
        ),
        (
            lambda r: r["protocol"].update(lr_scheduler_type="linear | <b>"),
            "protocol.lr_scheduler_type='linear | <b>' is not plain text for a card: a name of letters, digits, _ . - only.",
        ),
        (
            lambda r: r["protocol"].update({"<img src=x onerror=alert(1)>": 1}),
            "protocol has the key '<img src=x onerror=alert(1)>', which is not a name: letters, digits, _ . - only.",
        ),
        (
            lambda r: r["protocol"].update(extra={"a": 1}),
            "protocol.extra={'a': 1} is not a number, name or list of them.",
        ),
        (
            lambda r: r["data_sha256"].update(cola="`<script>`"),
            "data_sha256.cola='`<script>`' is not a sha256 hex digest (64 of 0-9a-f) or null.",
        ),
    ],
)
def test_html_or_markdown_where_a_name_is_expected_is_refused(run, tmp_path, change, message):  # noqa: F811
    path, error = refused_results(run, tmp_path, change)
    assert error.startswith(f"{path}: {message}"), error


def test_a_scheduler_or_tag_that_is_not_a_name_is_refused(run, tmp_path, capsys):  # noqa: F811
    model = copy_run(run.folder, tmp_path / "model")
    summary = json.loads((model / "training_summary.json").read_text())
    summary["training_arguments"]["lr_scheduler_type"] = "linear</td><script>"
    (model / "training_summary.json").write_text(json.dumps(summary))
    with pytest.raises(UserError) as error:
        release_command(release_args(model, run, tmp_path / "staged"))
    assert str(error.value) == (
        f"{model}/training_summary.json: training_arguments.lr_scheduler_type='linear</td><script>' is not plain text "
        "for a card: a name of letters, digits, _ . - only."
    )
    code, line = one_line_exit([*release_args(run.folder, run, tmp_path / "staged"), "--tag", 'v1"\n```\n<b>'], capsys)
    assert code == 2 and line.endswith(
        "error: --tag 'v1\"\\n```\\n<b>' is not a tag name: letters, digits and . _ + - only, e.g. v0.1.0 (see --help)"
    )
    assert not (tmp_path / "staged").exists()


def test_free_text_reaches_the_card_escaped():
    """Free text shows as written: one line, no tag, no table cell, link or code span of its own."""
    assert (
        cards.escaped("<img src=x onerror=alert(1)>\n| a | b |") == r"&lt;img src=x onerror=alert(1)&gt; \| a \| b \|"
    )
    assert (
        cards.escaped("[click](javascript:alert(1)) `x` a\\b & c")
        == r"\[click\](javascript:alert(1)) \`x\` a\\b &amp; c"
    )
    assert cards.escaped(cards.EMBEDDED_CORPUS_DESCRIPTION) == cards.EMBEDDED_CORPUS_DESCRIPTION  # plain text as is
    assert cards.code("BertModel") == "`BertModel`" and cards.code("a`b<i>") == r"a\`b&lt;i&gt;"
    # a teacher's recorded name that is no Hub id links nowhere and is shown escaped
    record = MadeFromRecord(teacher=Teacher(name="<b>x</b>/y", license="<i>mit</i>"))  # as no release would read it
    made = cards.MadeFrom.read(record, None, False)
    assert made.base_model is None and made.heading == "&lt;b&gt;x&lt;/b&gt;/y"
    assert made.teacher_text == "&lt;b&gt;x&lt;/b&gt;/y (licence &lt;i&gt;mit&lt;/i&gt;)"


@pytest.mark.heavy
def test_html_in_free_text_is_escaped_on_the_staged_card(run, tmp_path):  # noqa: F811
    """--hardware and --dataset (free text) with HTML and table-breaking text: the staged card shows them escaped,
    its table keeps its rows, and it validates."""
    hardware = "<img src=x onerror=alert(1)>\n| injected | row |"
    dataset = "my data](javascript:alert(1)) <script>alert(2)</script>"
    arguments = [*release_args(run.folder, run, tmp_path / "staged"), "--hardware", hardware, "--dataset", dataset]
    release_command(arguments)
    card = (tmp_path / "staged" / "symbert-tiny-original" / "main" / "README.md").read_text()
    assert not re.search(r"<(img|script)\b", card)
    assert "| hardware | &lt;img src=x onerror=alert(1)&gt; \\| injected \\| row \\| |\n| training time |" in card
    assert "| data | my data\\](javascript:alert(1)) &lt;script&gt;alert(2)&lt;/script&gt; |\n" in card


def test_a_baseline_label_reaches_the_table_escaped(run):  # noqa: F811
    results = GlueResults.read(run.glue / "glue_results.json")
    table = cards.glue_table(results, [("<b>teacher</b> | x\n| row", results)])
    header = table.splitlines()[0]
    assert header == (
        "| task | metric | mean ± std (%) | seeds | &lt;b&gt;teacher&lt;/b&gt; \\| x \\| row (%) | majority / chance (%) "
        "| against the baselines |"
    )
    assert all(row.count(" | ") == header.count(" | ") for row in table.splitlines()[2:-1])  # one cell per column


# e. The `bert` branch's figures: what the export measures, on its card, main's card and in its provenance


@pytest.mark.heavy
def test_the_bert_branch_figures_are_compared_with_a_new_measure(run, staged, tmp_path):  # noqa: F811
    main_stage = staged.stages[0]
    bert_stage = next(stage for stage in staged.stages if stage.revision == "bert")
    record = json.loads((bert_stage.folder / "provenance.json").read_text())["bert_export"]
    source = validation.load_symbert(bert_stage.source)
    measured = validation.export_difference(bert_stage, source, validation.check_inputs(source.config))
    stated = record["max_relative_difference"]  # what staging measured: validation's measure gives it again
    assert record["bound"] == 1e-05 and record["batch"] == [4, 32] and measured == pytest.approx(stated, abs=1e-12)
    figure = cards.BertExport.measure(bert_stage.folder, stated).measured

    def copied(name, provenance=None, card=None):
        folder = shutil.copytree(bert_stage.folder, tmp_path / name / "bert")
        main = shutil.copytree(main_stage.folder, tmp_path / name / "main")
        if provenance is not None:
            prov = json.loads((folder / "provenance.json").read_text())
            (folder / "provenance.json").write_text(json.dumps({**prov, "bert_export": {**record, **provenance}}))
        if card is not None:
            target = main if card == "main" else folder
            (target / "README.md").write_text(
                (target / "README.md").read_text().replace(figure, "largest relative difference 0.0e+00")
            )
        return [dataclasses.replace(main_stage, folder=main), dataclasses.replace(bert_stage, folder=folder)]

    with pytest.raises(UserError) as error:
        validation.validate(
            copied("claimed", provenance={"max_relative_difference": 5e-6})
            + copied("bound", provenance={"bound": 1.0})
            + copied("bert-card", card="bert")
            + copied("main-card", card="main")
        )
    message = str(error.value)
    claimed = cards.BertExport.measure(bert_stage.folder, 5e-6)
    assert re.search(
        rf"{tmp_path}/claimed/bert:\n  - provenance.json's bert_export.max_relative_difference=5e-06 is not what the "
        r"export measures \(\d\.\d\de[-+]\d\d, float64 on the fixed batch, as symbert-to-bert measures it\)\n"
        rf"  - bert/README.md does not state the export as measured \({re.escape(claimed.measured)}; ",
        message,
    ), message
    assert (
        f"{tmp_path}/bound/bert:\n  - provenance.json's bert_export has bound=1.0, batch=[4, 32]; the export is "
        "measured with bound 1e-05 on batch [4, 32]\n"
    ) in message
    assert (
        f"{tmp_path}/bert-card/bert:\n  - bert/README.md does not state the export as measured ({figure}; " in message
    )
    assert (
        f"{tmp_path}/main-card/bert:\n  - main/README.md does not state the export as measured ({figure}; " in message
    )
    assert f"{tmp_path}/claimed/main" not in message  # main's own checks pass: the figures are the bert stage's


# f. A staged file deleted after staging


def test_a_deleted_tokenizer_file_is_named_not_a_traceback(staged, tmp_path):  # noqa: F811
    main_stage = staged.stages[0]
    folder = shutil.copytree(main_stage.folder, tmp_path / "main")
    # the vocabulary's files: tokenizer.json (and under transformers 4.x vocab.txt, which it saves too)
    vocabulary = [name for name in ("tokenizer.json", "vocab.txt") if name in main_stage.files]
    assert vocabulary[0] == "tokenizer.json"
    for name in vocabulary:
        (folder / name).unlink()
    with pytest.raises(UserError) as error:
        validation.validate([dataclasses.replace(main_stage, folder=folder)])
    assert str(error.value) == (
        f"Validation failed; nothing was pushed.\n{folder}:\n"
        + "".join(f"  - {name} was staged but is missing\n" for name in vocabulary)
        + "  - so it was not loaded, nor its code run"
    )
    # without a manifest, the card and provenance checks name it too
    assert validation.check_files(dataclasses.replace(main_stage, folder=folder, files=None)) == [
        "tokenizer.json and vocab.txt are missing"
    ]


@pytest.mark.heavy
def test_a_file_deleted_between_validation_and_push_is_one_line_and_a_rerun_restages_it(
    run,  # noqa: F811
    tmp_path,
    monkeypatch,
    capsys,
):
    output = tmp_path / "staged"
    main = output / "symbert-tiny-original" / "main"
    validate = release.validate

    def validate_then_delete(stages):
        validate(stages)
        (main / "tokenizer_config.json").unlink()  # by hand, or by a run beside this one

    monkeypatch.setattr(release, "validate", validate_then_delete)
    monkeypatch.setattr(release.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", "hf_notARealToken")
    api = RecordingHfApi()
    monkeypatch.setattr(release, "HfApi", api)
    code, line = one_line_exit([*release_args(run.folder, run, output), "--push"], capsys)
    assert code == 2 and line.endswith(
        f"error: {main}/tokenizer_config.json was staged and validated but is missing now; run symbert-release again "
        "to stage it anew. Nothing was pushed."
    )
    assert api.calls == [] and (main / "model.safetensors").is_file()  # nothing pushed, nothing else lost
    monkeypatch.setattr(release, "validate", validate)
    release_command(release_args(run.folder, run, output))  # the rerun stages it anew, and validates
    assert (main / "tokenizer_config.json").read_bytes() == (run.folder / "tokenizer_config.json").read_bytes()


# f. What a model was made from: as its folder proves it, or refused


def made_from_run(run, folder, made_from, model_arguments=None, conversion=None):
    """A copy of the run recording `made_from` (training_summary.json), with `model_arguments` and, given, the
    folder's own conversion.json."""
    model = copy_run(run.folder, folder, made_from=made_from, model_arguments=model_arguments)
    if conversion is not None:
        (model / "conversion.json").write_text(json.dumps(conversion))
    return model


HUB_BERT = "google-bert/bert-base-uncased"
CONVERSION = {
    "bert": HUB_BERT,
    "bert_license": "apache-2.0",
    "attention_type": "pairwise",
    "layers": [{"layer": 0, "copy_error": 0.5, "fit_error": 0.2, "kept": "fit"}],
    "held_out_mean_cosine": {"copy": 0.9, "fit": 0.95},
}


@pytest.mark.parametrize(
    "made_from, arguments, message",
    [
        (
            {"init_from": None, "teacher": {"name": HUB_BERT, "license": "apache-2.0"}, "conversion": None},
            {"teacher": None},
            f"made_from names teacher '{HUB_BERT}', but the run's model_arguments.teacher is None: the record",
        ),
        (
            {"init_from": "converted", "teacher": None, "conversion": CONVERSION},
            {"init_from": "/data/converted"},
            "made_from.conversion is not {model}/conversion.json (absent): a conversion is shown as the folder's own",
        ),
        (
            {"teacher": None, "conversion": {**CONVERSION, "held_out_mean_cosine": {"copy": "0.9", "fit": 0.95}}},
            {},
            "made_from.conversion.held_out_mean_cosine.copy='0.9' is not a finite number in [-1, 1].",
        ),
        (
            {"teacher": None, "conversion": {**CONVERSION, "layers": [{"copy_error": 0.5, "fit_error": 0.2}]}},
            {},
            "made_from.conversion.layers[0].layer=None is not an integer >= 0.",
        ),
        (
            {"teacher": ["someone/teacher"]},
            {},
            "made_from.teacher is a JSON list, not an object.",
        ),
        (
            {"teacher": None, "conversion": {**CONVERSION, "held_out_mean_cosine": [0.9, 0.95]}},
            {},
            "made_from.conversion.held_out_mean_cosine is a JSON list, not an object.",
        ),
        (
            {"teacher": {"name": "someone/teacher", "license": "mit | <b>"}},
            {"teacher": "someone/teacher"},
            "made_from.teacher.license='mit | <b>' is not plain text for a card: a licence id of letters",
        ),
    ],
    ids=["a teacher the run had not", "a conversion the folder has not", "a string cosine", "a row without its layer",
         "a list for an object", "a list of cosines", "a licence that is not an id"],
)  # fmt: skip
def test_a_made_from_record_the_folder_does_not_bear_out_is_refused(run, tmp_path, made_from, arguments, message):
    model = made_from_run(run, tmp_path / "model", made_from, arguments)
    with pytest.raises(UserError) as error:
        release_command(release_args(model, run, tmp_path / "staged"))
    assert str(error.value).startswith(f"{model}/training_summary.json: {message.format(model=model)}"), error.value
    assert not (tmp_path / "staged").exists()


def test_a_base_model_other_than_the_record_names_is_refused(run, tmp_path):  # noqa: F811
    made_from = {"init_from": "converted", "teacher": None, "conversion": CONVERSION}
    model = made_from_run(run, tmp_path / "model", made_from, {"init_from": "/data/converted"}, CONVERSION)
    arguments = [*release_args(model, run, tmp_path / "staged"), "--base_model", "someone/other-bert"]
    with pytest.raises(UserError, match=f"--base_model 'someone/other-bert' is not the model {model} was made from"):
        release_command(arguments)
    assert not (tmp_path / "staged").exists()


@pytest.mark.heavy
@pytest.mark.parametrize("licence", [None, "mit"])
def test_a_teacher_s_licence_is_carried_and_none_is_claimed_where_its_card_states_none(run, tmp_path, licence):
    """A teacher whose card states no licence: the metadata states none (apache-2.0 would grant terms its owner
    never granted), and the card's text says its card states none; the base_model is the teacher the run had."""
    from huggingface_hub import ModelCard

    made_from = {"init_from": None, "teacher": {"name": "someone/teacher", "license": licence}, "conversion": None}
    model = made_from_run(run, tmp_path / "model", made_from, {"teacher": "someone/teacher"})
    release_command(release_args(model, run, tmp_path / "staged"))
    card = ModelCard.load(tmp_path / "staged" / "symbert-tiny-original" / "main" / "README.md")
    assert card.data.license == licence and card.data.base_model == "someone/teacher"
    assert ("licence not stated in its card" in card.text) == (licence is None)


def test_a_baseline_with_full_glue_results_is_compared_by_each_task_s_data(run, tmp_path):  # noqa: F811
    """mnli-m and mnli-mm are scored on mnli's data: the digests are looked up by task, so a baseline of the whole
    GLUE suite on the same data is taken, and one on other MNLI data refused."""
    digests = {task: f"{i:x}" * 64 for i, task in enumerate(glue_data.glue_mean_tasks())}
    paths = {}
    for name, mnli in (("model", digests["mnli"]), ("same", digests["mnli"]), ("other", "f" * 64)):
        paths[name] = bad_results(
            run, tmp_path / name, lambda r, mnli=mnli: r.update(data_sha256={**digests, "mnli": mnli})
        )
    model, same, other = (GlueResults.read(path) for path in paths.values())
    plan.check_baselines(paths["model"], model, [("same", same)])
    with pytest.raises(UserError, match="--baselines 'other' scored mnli-m on other data than"):
        plan.check_baselines(paths["model"], model, [("other", other)])


@pytest.mark.parametrize("data", ["https://example.com/glue", "file:///etc/glue", "../glue", "~/glue", "glue/dev/"])
def test_a_data_source_symbert_glue_never_records_is_refused(run, tmp_path, data):  # noqa: F811
    """protocol.data is the Hub datasets symbert-glue read, a --data_dir's absolute path, or (staged) its name."""
    path, error = refused_results(run, tmp_path, lambda r: r["protocol"].update(data=data))
    assert error.startswith(f"{path}: protocol.data={data!r} is not where symbert-glue reads data from: Hub datasets")
    for good in ("nyu-mll/glue", "/home/someone/glue_data", "glue_data"):
        GlueResults.from_json(path, {**json.loads(path.read_text()), "protocol": {**read_protocol(path), "data": good}})


def read_protocol(path):
    return json.loads(path.read_text())["protocol"]
