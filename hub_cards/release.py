"""Stage, validate and publish SymBERT models on the Hugging Face Hub.

    symbert-release runs/small runs/base --namespace my-org                    # dry run: stage, validate, show
    symbert-release runs/small runs/base --namespace my-org --push             # create the repositories and upload
    symbert-release runs/base/pairwise --checkpoints 20000,100000 --namespace my-org   # + branches step-20000, ...
    symbert-release --tiny_random --namespace my-org                           # one tiny random model per type

MODELS are `symbert-pretrain` output folders, or folders holding them (e.g. a `--compare` output, or one folder per
size): every folder below with a `training_summary.json` is a model. Each model needs its GLUE results file
(`glue_results.json`, written by `symbert-glue`), found under the model folder or under the `--results` paths and
matched to the model by the sha256 of its weights (of several, the one with the most runs; the output names the file
chosen and why). Each model is staged as `OUTPUT_DIR/<repo name>/main`, its plain
BERT export (symbert-to-bert: transformers' own BERT class, no code) as `OUTPUT_DIR/<repo name>/bert` (and
`OUTPUT_DIR/<repo name>/step-N` per checkpoint), then validated: it loads in a fresh Python process that cannot import
this project and reproduces the source model's logits (the export without remote code, with no code file and no
auto_map, and within 1e-5 relative of the source's outputs on a fixed batch), its card's model-index and its .eval_results/glue.yaml (the
Hub's current format) parse back into the same GLUE results, the GLUE results name its weights, every file the card
names is there, its code files are this project's (by sha256), its config.json holds what was staged (the source's: no
key added, removed or changed), the `bert` export's difference from the model that its provenance and both cards state
is the one measured again, and it holds no pickle. Nothing is pushed unless every model passes.

Nothing is unpickled: the training arguments come from `training_summary.json` ("training_arguments", written by
`symbert-pretrain`), and no training_args.bin, optimizer or RNG state is staged. Every repository id is checked with
huggingface_hub's rules and every staged folder must lie inside --output_dir before anything is written.

With --push, every repository is uploaded in one commit on `main`, tagged `--tag` (the revision the card pins); the
export becomes a branch `bert` and each checkpoint a branch `step-N`, each from main's commit with one commit of its
own; all repositories join the `--collection`.
The token comes from HF_TOKEN or `hf auth login` and is only ever handed to `HfApi`.
"""

import re
import sys
import tempfile
from importlib.metadata import version
from itertools import product

from huggingface_hub import HfApi, constants, get_token
from huggingface_hub.utils import validate_repo_id

from .. import ATTENTION_TYPES
from ..cli import UserError, command_parser, run_command
from . import eval_results as hub_eval
from .options import ReleaseOptions
from .plan import GLUE_PLOT, RESULTS_RULE, Stage, Staging, plan_models
from .pushing import push_or_explain, show
from .staging import stage_model, stage_tiny_random
from .validation import gone, validate


def parse_arguments(argv: list[str]) -> ReleaseOptions:
    parser = command_parser(__doc__)  # parser.error raises a one-line UserError
    parser.add_argument("models", nargs="*", help="symbert-pretrain output folders, or folders holding them")
    parser.add_argument("--namespace", required=True, help="Hub user or organisation that will own the repositories")
    parser.add_argument(
        "--results",
        nargs="*",
        default=[],
        help=f"glue_results.json files, or folders searched for them (never inside --output_dir): {RESULTS_RULE}",
    )
    parser.add_argument(
        "--dataset",
        help="pre-training data, a Hub dataset id or a description (default: as recorded by symbert-pretrain)",
    )
    parser.add_argument(
        "--hardware", help='what it was trained on, e.g. "NVIDIA H200" (default: as recorded by symbert-pretrain)'
    )
    parser.add_argument("--checkpoints", help="comma-separated steps whose checkpoint-N folders become branches step-N")
    parser.add_argument(
        "--glue_vs_step", help=f"GLUE-along-pre-training plot (default: {GLUE_PLOT} next to the results file)"
    )
    parser.add_argument("--name_template", default="symbert-{size}-{attention_type}", help="repository name")
    parser.add_argument("--tag", default=f"v{version('symbert')}", help="tag of the release commit; the card pins it")
    parser.add_argument("--collection", help='Hub collection title (default: "SymBERT", or "SymBERT tiny random")')
    parser.add_argument("--output_dir", default="release", help="where the repositories are staged")
    parser.add_argument("--tiny_random", action="store_true", help="stage one tiny random model per attention type")
    parser.add_argument("--private", action="store_true", help="create the repositories private")
    parser.add_argument("--force", action="store_true", help="replace the content of existing repositories that differ")
    parser.add_argument("--push", action="store_true", help="upload; without it, a dry run")
    parser.add_argument(
        "--baselines",
        nargs="*",
        default=[],
        metavar="LABEL=FILE",
        help="glue_results.json files of baselines shown beside every score (same tasks, data and protocol), each "
        'with its label, e.g. "all-MiniLM-L6-v2 (teacher)=glue/teacher/glue_results.json"',
    )
    parser.add_argument(
        "--base_model",
        help="Hub id of the BERT a converted or distilled model was made from, for the card's base_model (default: "
        "the teacher's name as recorded, where it is a Hub id)",
    )
    parser.add_argument(
        "--without_results",
        action="store_true",
        help="release models that no GLUE results file is for (by default refused, each named); their cards say no "
        "downstream score was measured",
    )
    args = parser.parse_args(argv)
    baselines = []
    for item in args.baselines:
        label, _, path = item.rpartition("=")
        if not label.strip() or not path:
            parser.error(f"--baselines {item!r} is not LABEL=FILE (a label, '=', a glue_results.json file)")
        if label.strip() in [known for known, _ in baselines]:
            parser.error(f"--baselines gives the label {label.strip()!r} twice; each baseline is listed once")
        baselines.append((label.strip(), path))
    if args.base_model is not None:
        try:
            validate_repo_id(args.base_model)
        except ValueError as error:
            parser.error(f"--base_model {args.base_model!r} is not a Hub repository id ({error})")
    if not TAG.fullmatch(args.tag):  # the cards pin it, in text and in Python code
        parser.error(f"--tag {args.tag!r} is not a tag name: letters, digits and . _ + - only, e.g. v0.1.0")
    if args.tiny_random == bool(args.models):
        parser.error("give model folders, or --tiny_random (not both)")
    if args.checkpoints and not all(s.strip().isdigit() for s in args.checkpoints.split(",")):
        parser.error(f"--checkpoints {args.checkpoints!r} must be comma-separated step numbers, e.g. 20000,100000")
    if args.collection is None:
        args.collection = "SymBERT tiny random" if args.tiny_random else "SymBERT"
    try:
        for size, attention_type in product(("small", "base"), ATTENTION_TYPES):
            validate_repo_id(f"{args.namespace}/{args.name_template.format(size=size, attention_type=attention_type)}")
    except (KeyError, IndexError, ValueError) as error:
        parser.error(
            f"--namespace {args.namespace!r} / --name_template {args.name_template!r} do not make a repository "
            f"id ({error}); the template may use {{size}} and {{attention_type}}"
        )
    return ReleaseOptions(
        models=tuple(args.models),
        namespace=args.namespace,
        results=tuple(args.results),
        dataset=args.dataset,
        hardware=args.hardware,
        checkpoints=tuple(int(step) for step in args.checkpoints.split(",")) if args.checkpoints else (),
        glue_vs_step=args.glue_vs_step,
        name_template=args.name_template,
        tag=args.tag,
        collection=args.collection,
        output_dir=args.output_dir,
        tiny_random=args.tiny_random,
        private=args.private,
        force=args.force,
        push=args.push,
        baselines=tuple(baselines),
        base_model=args.base_model,
        without_results=args.without_results,
    )


TAG = re.compile(r"[A-Za-z0-9][\w.+-]*")


def check_still_staged(stages: list[Stage]) -> None:
    """Refuse, in one line naming it, a staged file gone since validation (deleted by hand, or by a run beside this
    one): the push would fail part way. Nothing staged is touched; a rerun stages it again."""
    for stage in stages:
        if missing := gone(stage):
            raise UserError(
                f"{stage.folder / missing[0]} was staged and validated but is missing now"
                + (f" (and {len(missing) - 1} more: {', '.join(missing[1:4])})" if len(missing) > 1 else "")
                + "; run symbert-release again to stage it anew. Nothing was pushed."
            )


def release(options: ReleaseOptions) -> list[Stage]:
    """Stage and validate every model, then show (dry run) or push; returns the `Stage`s."""
    token = None
    if options.push:
        if constants.HF_HUB_OFFLINE:
            raise UserError(
                "--push needs the Hugging Face Hub, but offline mode is on (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is "
                "set): unset it to push. Nothing was staged."
            )
        token = get_token()  # HF_TOKEN, else the `hf auth login` token; handed to HfApi, never shown
        if not token:
            raise UserError(
                "--push needs a Hugging Face token: set HF_TOKEN or run `hf auth login`. Nothing was staged."
            )
    if not options.tiny_random and hub_eval.EvalResultEntry is None:
        print(hub_eval.EVAL_RESULTS_NOTICE, file=sys.stderr)
    with tempfile.TemporaryDirectory() as workdir:
        if options.tiny_random:
            stages = stage_tiny_random(options, workdir)
        else:
            staging = Staging(options.output_dir, options.name_template)
            settings = dict(
                staging=staging,
                tag=options.tag,
                dataset=options.dataset,
                hardware=options.hardware,
                workdir=workdir,
                base_model=options.base_model,
            )
            stages = [stage for plan in plan_models(options) for stage in stage_model(plan, **settings)]
        validate(stages)
        print(
            f"Validated {len(stages)} staged folders in {options.output_dir}: each loads in a fresh process with "
            "trust_remote_code=True (the `bert` exports as plain BERT, without it) and reproduces its source model; "
            "cards, GLUE results and provenance check out; the code files are the project's (the exports have none) "
            "and no file is a pickle."
        )
        if options.push:
            check_still_staged(stages)
            push_or_explain(stages, HfApi(token=token), options)
        else:
            show(stages, options)
            print("\nDry run: nothing pushed. Run again with --push to upload.")
    return stages


def release_command(argv: list[str]) -> list[Stage]:
    return release(parse_arguments(argv))


def main(argv: list[str] | None = None) -> None:
    run_command(release_command, argv)


if __name__ == "__main__":
    main()
