"""symbert-pretrain --init_from FOLDER --teacher PATH: a converted model distilled toward its BERT teacher, with the
loss against hand computation, a resumed run identical to an uninterrupted one, and bad teachers refused in one line."""

import json
import shutil

import pytest
import torch
from transformers import AutoTokenizer, BertForMaskedLM, BertForSequenceClassification, BertModel

from helpers.assertions import assert_one_line
from helpers.corpora import run_args, tiny_corpus, tiny_sentences
from helpers.tiny import bert_classifier, bert_teacher, sentence_embedding_bert, two_texts
from symbert import SymBertForMaskedLM
from symbert.training import pretrain
from symbert.training.distillation import DistillationLoss, head_projections, load_teacher, whole_texts


@pytest.fixture(scope="module")
def distillation_setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("distil")
    corpus = tiny_corpus(root / "corpus", tiny_sentences(300, seed=4), vocab_size=120)
    tokenizer = AutoTokenizer.from_pretrained(corpus / "tokenizer")
    teacher = bert_teacher(root / "teacher", tokenizer)
    teacher_with_head = bert_teacher(root / "teacher-mlm", tokenizer, head=True)
    student, _ = SymBertForMaskedLM.from_bert(teacher, attention_type="pairwise", calibration_texts=None)
    student.save_pretrained(root / "student")
    tokenizer.save_pretrained(root / "student")
    return {"root": root, "corpus": corpus, "teacher": teacher, "teacher_mlm": teacher_with_head}


def distil_args(setup, output, *extra, teacher="teacher", **overrides):
    overrides = {"tokenizer": None, "learning_rate": "1e-3", "max_seq_length": 32, **overrides}
    args = run_args(setup["corpus"], output, **overrides)
    return [*args, "--init_from", str(setup["root"] / "student"), "--teacher", str(setup[teacher]), *extra]


def eval_losses(output):
    return [e["eval_loss"] for e in json.loads((output / "metrics.json").read_text()) if "eval_loss" in e]


@pytest.mark.heavy
@pytest.mark.parametrize("teacher", ["teacher", "teacher_mlm"])
def test_distillation_brings_the_student_toward_its_teacher(distillation_setup, tmp_path, teacher):
    output = tmp_path / "run"
    pretrain.main(
        distil_args(distillation_setup, output, "--max_steps", "16", "--eval_on_start", "true", teacher=teacher)
    )
    losses = eval_losses(output)
    assert len(losses) >= 3 and losses[-1] < 0.7 * losses[0], losses
    student = SymBertForMaskedLM.from_pretrained(output)
    assert student.config.attention_type == "pairwise"  # the --init_from folder's config, not the recipe's
    rates = [e for e in json.loads((output / "metrics.json").read_text()) if "train_tokens_per_second" in e]
    assert rates and all(e["train_tokens_per_second"] > 0 for e in rates)


def test_the_loss_is_the_layers_normalised_error_plus_the_masked_lm_divergence(distillation_setup):
    teacher = BertForMaskedLM.from_pretrained(distillation_setup["teacher_mlm"]).eval()
    student = SymBertForMaskedLM.from_pretrained(distillation_setup["root"] / "student").eval()
    input_ids = torch.tensor([[2, 10, 11, 12, 13, 3], [2, 20, 21, 3, 0, 0]])
    attention_mask = (input_ids != 0).long()
    labels = torch.full_like(input_ids, -100)
    labels[0, 2], labels[1, 1] = 11, 20
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
    loss = DistillationLoss(teacher)(student, inputs)
    mine = student.bert(input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states
    theirs = teacher.bert(input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states
    mask = attention_mask[..., None].float()
    hidden = sum(((a - b) ** 2 * mask).sum() / (b**2 * mask).sum() for a, b in zip(mine[1:], theirs[1:])) / 2
    masked = labels != -100
    p_teacher = teacher.cls(theirs[-1][masked]).softmax(-1)
    log_student = student.cls(mine[-1][masked]).log_softmax(-1)
    divergence = (p_teacher * (p_teacher.log() - log_student)).sum(-1).mean()
    pooled = [(states[-1] * mask).sum(1) / mask.sum(1) for states in (mine, theirs)]
    sentence = (1 - torch.nn.functional.cosine_similarity(*pooled)).mean()
    assert torch.allclose(loss, hidden + sentence + divergence, rtol=1e-4), (loss, hidden + sentence + divergence)
    without_sentence = DistillationLoss(teacher, pooled_weight=0.0)(student, inputs)
    assert torch.allclose(without_sentence, hidden + divergence, rtol=1e-4)
    # the student is its teacher: no loss
    same = SymBertForMaskedLM.from_bert(distillation_setup["teacher_mlm"], calibration_texts=None)[0].eval()
    assert DistillationLoss(teacher)(same, inputs).abs().item() < 1e-5


def test_the_attention_stage_loss_is_each_layers_attention_error_on_the_teachers_inputs(distillation_setup):
    teacher = BertForMaskedLM.from_pretrained(distillation_setup["teacher_mlm"]).eval()
    student = SymBertForMaskedLM.from_pretrained(distillation_setup["root"] / "student").eval()
    inputs = two_texts()
    input_ids, attention_mask = inputs["input_ids"], inputs["attention_mask"]
    loss = DistillationLoss(teacher, stage="attention")(student, inputs)
    # by hand: layer l's attention modules, both given the teacher's layer-l input, eager padding mask
    hidden = teacher.bert(input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states
    additive = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    mask = attention_mask[..., None].float()
    errors = []
    for index, (mine, theirs) in enumerate(zip(student.bert.encoder.layer, teacher.bert.encoder.layer)):
        expected = theirs.attention.self(hidden[index], attention_mask=additive)[0]
        produced = mine.attention.self(hidden[index], attention_mask=additive)[0]
        errors.append(((produced - expected) ** 2 * mask).sum() / (expected**2 * mask).sum())
    assert torch.allclose(loss, sum(errors) / len(errors), rtol=1e-4), (loss, errors)
    # only the attention is trained in that stage: the student's other parameters are left frozen
    pretrain.trainable_only_attention(student)
    trainable = {name for name, parameter in student.named_parameters() if parameter.requires_grad}
    assert trainable and all(".attention.self." in name for name in trainable)
    assert any(name.endswith("attention.self.pairwise") for name in trainable)


def softmax_divergence(mine, theirs, mask):
    """KL(theirs ‖ mine) of row softmaxes over the real keys, by hand: one sequence, head and query at a time."""
    total, count = 0.0, 0
    for b in range(mask.shape[0]):
        real = mask[b].bool()
        for h in range(mine.shape[1]):
            for q in torch.nonzero(real).flatten():
                p = theirs[b, h, q, real].softmax(-1)
                total += (p * (p.log() - mine[b, h, q, real].log_softmax(-1))).sum()
                count += 1
    return total / count


@pytest.mark.parametrize("attention_type", ["original", "shared", "mhe_add", "mhe_mul", "gqa", "pairwise"])
def test_head_projections_give_each_types_own_attention_output(attention_type, distillation_setup):
    # the per-head query, key and value the relation losses read are the ones the module's output is made of
    student, _ = SymBertForMaskedLM.from_bert(
        distillation_setup["teacher"], attention_type=attention_type, calibration_texts=None
    )
    module = student.bert.encoder.layer[0].attention.self.eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))  # away from the copied BERT's values
    hidden = torch.randn(2, 5, 128)
    query, key, value = head_projections(module, hidden)
    by_hand = ((query @ key.transpose(-1, -2)).softmax(-1) @ value).transpose(1, 2).flatten(2)
    assert torch.allclose(by_hand, module(hidden)[0], atol=1e-5)
    bert = BertModel.from_pretrained(distillation_setup["teacher"]).encoder.layer[0].attention.self.eval()
    query, key, value = head_projections(bert, hidden)
    by_hand = ((query @ key.transpose(-1, -2)).softmax(-1) @ value).transpose(1, 2).flatten(2)
    assert torch.allclose(by_hand, bert(hidden)[0], atol=1e-5)


def test_the_relation_losses_are_the_kl_divergences_of_attention_maps_and_value_relations(distillation_setup):
    teacher = BertModel.from_pretrained(distillation_setup["teacher"]).eval()
    student = SymBertForMaskedLM.from_pretrained(distillation_setup["root"] / "student").eval()
    inputs = two_texts()
    input_ids, attention_mask = inputs["input_ids"], inputs["attention_mask"]
    hidden = teacher(input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states
    pairs = list(zip(student.bert.encoder.layer, teacher.encoder.layer))
    maps, values = [], []
    for index, (mine, theirs) in enumerate(pairs):
        (q_s, k_s, v_s), (q_t, k_t, v_t) = (head_projections(m.attention.self, hidden[index]) for m in (mine, theirs))
        maps.append(softmax_divergence(q_s @ k_s.transpose(-1, -2), q_t @ k_t.transpose(-1, -2), attention_mask))
        scale = v_s.shape[-1] ** 0.5
        values.append(
            softmax_divergence(v_s @ v_s.transpose(-1, -2) / scale, v_t @ v_t.transpose(-1, -2) / scale, attention_mask)
        )
    base = DistillationLoss(teacher, stage="attention")(student, inputs)
    with_maps = DistillationLoss(teacher, stage="attention", attention_map_weight=0.5)(student, inputs)
    with_values = DistillationLoss(teacher, stage="attention", value_relation_weight=2.0)(student, inputs)
    assert torch.allclose(with_maps - base, 0.5 * sum(maps) / len(maps), rtol=1e-4), (with_maps - base, maps)
    assert torch.allclose(with_values - base, 2.0 * sum(values) / len(values), rtol=1e-4), (with_values - base, values)
    # in the model stage each model's values come from its own layer inputs
    mine_hidden = student.bert(input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states
    own = []
    for index, (mine, theirs) in enumerate(pairs):
        v_s = head_projections(mine.attention.self, mine_hidden[index])[2]
        v_t = head_projections(theirs.attention.self, hidden[index])[2]
        scale = v_s.shape[-1] ** 0.5
        own.append(
            softmax_divergence(v_s @ v_s.transpose(-1, -2) / scale, v_t @ v_t.transpose(-1, -2) / scale, attention_mask)
        )
    base = DistillationLoss(teacher)(student, inputs)
    with_values = DistillationLoss(teacher, value_relation_weight=1.0)(student, inputs)
    assert torch.allclose(with_values - base, sum(own) / len(own), rtol=1e-4), (with_values - base, own)
    # a student equal to its teacher: no relation loss either
    same = SymBertForMaskedLM.from_bert(distillation_setup["teacher"], calibration_texts=None)[0].eval()
    both = DistillationLoss(teacher, stage="attention", attention_map_weight=1.0, value_relation_weight=1.0)
    assert both(same, inputs).abs().item() < 1e-5


def test_a_classifier_teacher_is_matched_through_its_own_pooler_and_classifier(distillation_setup, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(distillation_setup["teacher"])
    folder = bert_classifier(tmp_path / "classifier", tokenizer)
    config = SymBertForMaskedLM.from_pretrained(distillation_setup["root"] / "student").config
    teacher = load_teacher(str(folder), config)
    assert isinstance(teacher, BertForSequenceClassification)
    student = SymBertForMaskedLM.from_pretrained(distillation_setup["root"] / "student").eval()
    inputs = two_texts()
    input_ids, attention_mask = inputs["input_ids"], inputs["attention_mask"]
    mine = student.bert(input_ids, attention_mask=attention_mask).last_hidden_state
    theirs = teacher(input_ids, attention_mask=attention_mask).logits
    log_student = teacher.classifier(teacher.bert.pooler(mine)).log_softmax(-1)
    p_teacher = theirs.softmax(-1)
    divergence = (p_teacher * (p_teacher.log() - log_student)).sum(-1).mean()
    without_head = DistillationLoss(BertModel.from_pretrained(folder).eval())(student, inputs)
    loss = DistillationLoss(teacher)(student, inputs)
    assert torch.allclose(loss - without_head, divergence, rtol=1e-4), (loss - without_head, divergence)
    loss.backward()  # through the teacher's frozen head into the student's encoder
    assert student.bert.encoder.layer[-1].output.dense.weight.grad.abs().sum() > 0
    assert all(parameter.grad is None for parameter in teacher.parameters())
    # packed blocks ([CLS]=2 ... [SEP]=3 a text): every loss is taken on the texts they hold whole, each run alone
    blocks = torch.tensor([[2, 10, 11, 3, 2, 20], [21, 3, 2, 30, 31, 3]])
    packed = {"input_ids": blocks, "attention_mask": torch.ones_like(blocks), "labels": torch.full_like(blocks, -100)}
    packed["labels"][0, 1] = 10
    texts = torch.tensor([[2, 10, 11, 3], [2, 30, 31, 3]])
    mine = student.bert(texts).last_hidden_state
    log_student = teacher.classifier(teacher.bert.pooler(mine)).log_softmax(-1)
    p_teacher = teacher(texts).logits.softmax(-1)
    divergence = (p_teacher * (p_teacher.log() - log_student)).sum(-1).mean()
    alone = {"input_ids": texts, "attention_mask": torch.ones_like(texts), "labels": torch.full_like(texts, -100)}
    alone["labels"][:, 0] = 2
    without_head = DistillationLoss(BertModel.from_pretrained(folder).eval())(student, alone)
    loss = DistillationLoss(teacher, text_tokens=(2, 3, 0))(student, packed)
    assert torch.allclose(loss - without_head, divergence, rtol=1e-4), (loss - without_head, divergence)
    ragged = torch.tensor([[2, 10, 3, 2, 11, 12, 13, 3]])  # texts of two lengths: padded, and masked
    padded = whole_texts(ragged, 2, 3, 0, most=8)
    assert padded["input_ids"].tolist() == [[2, 10, 3, 0, 0], [2, 11, 12, 13, 3]]
    assert padded["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert whole_texts(ragged, 2, 3, 0, most=1)["input_ids"].tolist() == [[2, 10, 3]]
    assert whole_texts(torch.tensor([[10, 11, 3, 2, 12]]), 2, 3, 0, most=8) is None


@pytest.mark.parametrize("stage", ["attention", "model"])
def test_without_a_teacher_mlm_head_both_models_read_the_text_unmasked(distillation_setup, stage):
    teacher = BertModel.from_pretrained(distillation_setup["teacher"]).eval()
    student = SymBertForMaskedLM.from_pretrained(distillation_setup["root"] / "student").eval()
    text = torch.tensor([[2, 10, 11, 12, 13, 3]])
    masked = text.clone()
    masked[0, 2] = 4  # another token where the collator put [MASK] or a random one
    labels = torch.full_like(text, -100)
    labels[0, 2] = 11
    loss = DistillationLoss(teacher, stage=stage)
    ones = torch.ones_like(text)
    on_masked = loss(student, {"input_ids": masked, "attention_mask": ones, "labels": labels})
    on_text = loss(student, {"input_ids": text, "attention_mask": ones, "labels": labels})
    assert torch.allclose(on_masked, on_text, rtol=1e-5), (on_masked, on_text)


@pytest.mark.slow  # a stopped or concurrent run: README's suite stays under 10 minutes
def test_a_stopped_distillation_resumes_to_the_same_weights(distillation_setup, tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    pretrain.main(distil_args(distillation_setup, straight))
    resumed.mkdir()  # as the run was left when stopped right after its checkpoint at step 4
    shutil.copytree(straight / "checkpoint-4", resumed / "checkpoint-4")
    pretrain.main(distil_args(distillation_setup, resumed))
    assert eval_losses(resumed)[-1] == eval_losses(straight)[-1]
    a, b = (SymBertForMaskedLM.from_pretrained(path).state_dict() for path in (straight, resumed))
    assert all(torch.equal(a[name], b[name]) for name in a)


@pytest.mark.parametrize(
    "change, message",
    [
        ("another teacher", "checkpoint-4: it was trained toward 'teacher' (weights "),
        ("teacher weights changed", "this run toward 'teacher' (weights "),
        ("no teacher", "this run without a teacher"),
        ("another stage", "stage 'model'), this run toward 'teacher' (weights"),
        ("another loss weight", "stage 'model', value_relation_loss_weight 0.5)"),
    ],
)
def test_a_resume_toward_another_teacher_is_refused_in_one_line(distillation_setup, tmp_path, capsys, change, message):
    straight = tmp_path / "straight"
    pretrain.main(distil_args(distillation_setup, straight))
    resumed = tmp_path / "resumed"
    resumed.mkdir()  # as the run was left when stopped right after its checkpoint at step 4
    shutil.copytree(straight / "checkpoint-4", resumed / "checkpoint-4")
    argv = distil_args(distillation_setup, resumed)
    teacher = argv.index("--teacher")
    if change == "another teacher":
        argv[teacher + 1] = str(distillation_setup["teacher_mlm"])
    elif change == "teacher weights changed":
        changed = tmp_path / "teacher"
        shutil.copytree(distillation_setup["teacher"], changed)
        model = BertModel.from_pretrained(changed)
        with torch.no_grad():
            model.embeddings.word_embeddings.weight[5] += 1
        model.save_pretrained(changed)
        argv[teacher + 1] = str(changed)
    elif change == "no teacher":
        del argv[teacher : teacher + 2]
    elif change == "another loss weight":
        argv += ["--value_relation_loss_weight", "0.5"]
    else:
        argv += ["--distill_stage", "attention"]
    capsys.readouterr()  # the first run's output
    with pytest.raises(SystemExit) as stopped:
        pretrain.main(argv)
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bars of the models' loading
    assert stopped.value.code == 2 and f"Cannot resume from {resumed / 'checkpoint-4'}: " in last and message in last


@pytest.mark.parametrize(
    "change, message",
    [
        ({"hidden_size": 64, "intermediate_size": 128}, "its hidden_size 64 (the student's 128)"),
        ({"num_attention_heads": 4}, "its num_attention_heads 4 (the student's 2)"),
        ({"vocab_size": 500}, "its vocab_size 500 (the student's"),
        (
            {"max_position_embeddings": 16},
            "reads at most 16 tokens (its max_position_embeddings), fewer than the blocks'",
        ),
    ],
)
def test_a_teacher_of_another_shape_is_refused_in_one_line(distillation_setup, tmp_path, change, message, capsys):
    tokenizer = AutoTokenizer.from_pretrained(distillation_setup["corpus"] / "tokenizer")
    distillation_setup = {**distillation_setup, "other": bert_teacher(tmp_path / "other", tokenizer, **change)}
    capsys.readouterr()
    argv = distil_args(distillation_setup, tmp_path / "run", teacher="other")
    assert_one_line(pretrain.main, argv, message, capsys)
    assert not (tmp_path / "run" / "training_summary.json").exists()


def test_a_teacher_of_another_vocabulary_of_the_same_size_is_refused_in_one_line(distillation_setup, tmp_path, capsys):
    other = tiny_corpus(tmp_path / "other", tiny_sentences(300, seed=9), vocab_size=120)
    tokenizer = AutoTokenizer.from_pretrained(other / "tokenizer")
    teacher = bert_teacher(tmp_path / "teacher", tokenizer)
    assert len(tokenizer) == len(AutoTokenizer.from_pretrained(distillation_setup["teacher"]))  # only the words differ
    argv = distil_args(distillation_setup, tmp_path / "run")
    argv[argv.index("--teacher") + 1] = str(teacher)
    capsys.readouterr()
    assert_one_line(
        pretrain.main, argv, "reads text with another vocabulary than this run's tokenizer (e.g. id", capsys
    )


def test_init_from_a_bert_folder_is_refused_in_one_line(distillation_setup, tmp_path, capsys):
    argv = run_args(distillation_setup["corpus"], tmp_path / "run", tokenizer=None)
    argv += ["--init_from", str(distillation_setup["teacher"])]
    assert_one_line(pretrain.main, argv, "is a 'bert' model, not a SymBERT one; convert a BERT first", capsys)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--attention_type", "shared"], "attention_type 'shared' is not --init_from"),
        (["--config_overrides", '{"attention_type": "symmetric"}'], "attention_type 'symmetric' is not --init_from"),
        (["--compare", "original,symmetric"], "--compare 'original,symmetric' trains each type from scratch"),
    ],
)
def test_init_from_with_another_attention_type_is_refused_in_one_line(
    distillation_setup, tmp_path, capsys, extra, message
):
    # the run would train the folder's pairwise model and label it with the type named
    argv = [*distil_args(distillation_setup, tmp_path / "run"), *extra]
    assert_one_line(pretrain.main, argv, message, capsys)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.xdist_group("several_processes")  # .ci/run: one at a time beside the other slow tests
def test_distillation_under_two_processes(distillation_setup, tmp_path):
    import os
    import subprocess
    import sys

    output = tmp_path / "ddp"
    args = distil_args(distillation_setup, output, "--per_device_train_batch_size", "2", "--eval_on_start", "true")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    result = subprocess.run(
        [*launcher, "-m", "symbert.training.pretrain", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    losses = eval_losses(output)
    assert losses[-1] < 0.8 * losses[0], losses
    summary = json.loads((output / "training_summary.json").read_text())
    assert summary["world_size"] == 2 and summary["global_batch_size"] == 4


@pytest.mark.heavy
def test_a_converted_and_distilled_model_keeps_its_record_and_loads_in_sentence_transformers(
    distillation_setup, tmp_path
):
    from symbert.tools import convert

    tokenizer = AutoTokenizer.from_pretrained(distillation_setup["corpus"] / "tokenizer")
    bert = sentence_embedding_bert(tmp_path / "st-bert", tokenizer)
    calibration = tmp_path / "calibration.txt"
    calibration.write_text("\n".join(tiny_sentences(40, seed=9)) + "\n")
    argv = [str(bert), str(tmp_path / "converted"), "--attention_type", "pairwise", "--held_out", "8"]
    convert.main([*argv, "--calibration_files", str(calibration)])
    conversion = json.loads((tmp_path / "converted" / "conversion.json").read_text())
    assert conversion["bert"] == "st-bert" and conversion["calibration"] == ["calibration.txt"]
    assert conversion["bert_license"] == "apache-2.0"
    assert conversion["bert"] == "st-bert" and conversion["bert_license"] == "apache-2.0"
    setup = {**distillation_setup, "root": tmp_path, "st": bert}
    (tmp_path / "student").symlink_to(tmp_path / "converted")
    output = tmp_path / "run"
    pretrain.main(distil_args(setup, output, teacher="st"))
    for name in ("conversion.json", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json"):
        assert (output / name).read_bytes() == (
            bert / name if name != "conversion.json" else tmp_path / "converted" / name
        ).read_bytes()
    made_from = json.loads((output / "training_summary.json").read_text())["made_from"]
    assert made_from["init_from"] == "student" and made_from["conversion"] == conversion
    assert made_from["teacher"] == {
        "name": "st-bert",
        "license": "apache-2.0",
        "architecture": "BertModel",
        "mlm_head": False,
    }
    sentence_transformers = pytest.importorskip("sentence_transformers")
    texts = ["the old house stood by the river", "a letter came at night"]
    encoded = sentence_transformers.SentenceTransformer(str(output), trust_remote_code=True, device="cpu").encode(texts)
    student = SymBertForMaskedLM.from_pretrained(output).bert.eval()
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = student(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1)
    torch.testing.assert_close(torch.from_numpy(encoded), expected, atol=1e-5, rtol=1e-5)
