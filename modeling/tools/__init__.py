"""The `symbert-*` commands that work on saved models (parameter table, symmetry analysis, ONNX and BERT exports) and
the fresh-process loader. They sit beside the model, not in the folder that save_pretrained copies."""
