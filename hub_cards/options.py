"""What a release was asked for: symbert-release's command line as values, built once by release.py."""

from dataclasses import dataclass


@dataclass(frozen=True)
class ReleaseOptions:
    """symbert-release's arguments, parsed and checked (`release.parse_arguments`); see its --help for each."""

    models: tuple[str, ...]  # symbert-pretrain output folders, or folders holding them
    namespace: str  # the Hub user or organisation that will own the repositories
    results: tuple[str, ...]  # glue_results.json files, or folders searched for them
    dataset: str | None  # None: as recorded by symbert-pretrain
    hardware: str | None  # None: as recorded by symbert-pretrain
    checkpoints: tuple[int, ...]  # steps whose checkpoint-N folders become branches step-N
    glue_vs_step: str | None  # None: the plot next to the results file
    name_template: str
    tag: str
    collection: str | None
    output_dir: str
    tiny_random: bool
    private: bool
    force: bool
    push: bool
    # (label, glue_results.json) scored beside the model's on the same tasks, data and protocol: e.g. the teacher
    # fine-tuned identically, the same type trained from scratch
    baselines: tuple[tuple[str, str], ...] = ()
    base_model: str | None = None
    without_results: bool = False  # release models no GLUE results file is for, their cards saying so  # the Hub id of the model it was made from (card metadata); default: as recorded
