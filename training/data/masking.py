"""BERT's masking of pre-training blocks (80/10/10), reproducible from the seed and the batch alone."""

import hashlib
from dataclasses import dataclass

import numpy as np
import torch
from transformers import DataCollatorForLanguageModeling

from ... import SymBertConfig


@dataclass
class ResumableMLMCollator(DataCollatorForLanguageModeling):
    """BERT's dynamic masking (80/10/10), with each batch's masks drawn from a generator seeded by `mask_seed` and the
    batch's token ids instead of the global RNG.

    The Trainer collates a batch ahead of the checkpoint it saves, out of reach of the RNG state stored there, so with
    the global RNG a resumed run would mask differently from an uninterrupted one. Seeded by content, every batch is
    masked the same in both; shuffling still gives a block different masks in different epochs, and the held-out
    blocks get the same masks at every evaluation, so eval losses along a run are comparable.

    With `max_predictions_per_seq` (the model config's, for a compiled step's static shapes), a batch never holds
    more than batch × that many masked positions: a random few of the extras, drawn from the same generator, are
    left unmasked. A batch within the cap draws nothing more, so it is masked exactly as without one.
    """

    mask_seed: int = 0
    max_predictions_per_seq: int | None = None

    def torch_call(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        ids = np.asarray([example["input_ids"] for example in examples], dtype=np.int64)
        digest = hashlib.blake2b(ids.tobytes(), digest_size=8, key=self.mask_seed.to_bytes(8, "little")).digest()
        self.generator = torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)
        if all(example.keys() == {"input_ids"} for example in examples):
            # Blocks of one length: the batch as the tokenizer's padding and special-token mask would make it, without
            # their per-token Python loops (the same masks: tests/training/test_pretrain.py)
            input_ids = torch.from_numpy(ids)
            special = torch.isin(input_ids, torch.tensor(self.tokenizer.all_special_ids))
            batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
            batch["input_ids"], batch["labels"] = self.torch_mask_tokens(input_ids, special_tokens_mask=special)
        else:
            batch = super().torch_call(examples)
        if self.max_predictions_per_seq is not None:
            cap_predictions(batch, len(examples) * self.max_predictions_per_seq, self.generator)
        return batch


def cap_predictions(batch: dict[str, torch.Tensor], cap: int, generator: torch.Generator) -> None:
    """Unmask a random subset of `batch`'s masked positions (labels != -100) beyond `cap`, in place: each gets its
    original id back (its label) and the label -100, so the model sees and predicts it as an ordinary token."""
    input_ids, labels = batch["input_ids"].view(-1), batch["labels"].view(-1)
    masked = (labels != -100).nonzero().squeeze(1)
    extra = masked.numel() - cap
    if extra <= 0:
        return
    unmasked = masked[torch.randperm(masked.numel(), generator=generator)[:extra]]
    input_ids[unmasked] = labels[unmasked]
    labels[unmasked] = -100


def prediction_cap(config: SymBertConfig) -> int | None:
    """The collator's cap on masked positions per block: the model's max_predictions_per_seq, which its sparse
    prediction uses (and refuses a batch above); None without sparse prediction."""
    return config.max_predictions_per_seq if config.sparse_prediction else None
