"""What the oldest supported huggingface_hub (the 0.x releases transformers 4.54 needs) lacks or names differently,
for the release. Each item says which version lets it go: when pyproject.toml's lower bound passes it, delete the item
and keep its newer branch. (training/compat.py holds the transformers fallbacks.)"""

# Goes with huggingface_hub 0.x, which does not export RepoFile at the top level.
from huggingface_hub.hf_api import RepoFile

# Goes with huggingface_hub 0.x: the .eval_results/ format of 1.x.
try:
    from huggingface_hub import EvalResultEntry, eval_result_entries_to_yaml, parse_eval_result_entries
except ImportError:
    EvalResultEntry = eval_result_entries_to_yaml = parse_eval_result_entries = None

__all__ = ["EvalResultEntry", "RepoFile", "eval_result_entries_to_yaml", "parse_eval_result_entries"]
