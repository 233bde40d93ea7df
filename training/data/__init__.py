"""The pre-training data path: corpus texts, tokenizer, blocks (cut from texts or prepared once) and masking."""
