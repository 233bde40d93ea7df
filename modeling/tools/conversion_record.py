"""conversion.json: symbert-convert's record of how a model was made from a BERT. It is written into the converted
folder, carried by `symbert-pretrain --init_from` into its final model and into training_summary.json's
"made_from", and shown on the release's card. Read back with every value the card shows checked: a bad one is one
line naming the file, the field and what is allowed. Records of older versions may lack fields; those read as None."""

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from ..cli import UserError
from ..files import write_atomically
from ..json_files import LICENCE_RULE, NAME, mapping, number, plain_text, read_json


@dataclass(frozen=True, kw_only=True)
class LayerFit:
    """One layer's row: its attention output's relative error against BERT's on held-out text, copied and fitted,
    which of the two was kept, and the fit's output scale and inputs ("bert" or "own": the converted model's)."""

    layer: int
    copy_error: float | None = None
    fit_error: float | None = None
    kept: str | None = None  # "copy" or "fit"
    inputs: str | None = None
    output_scale: float | None = None
    fitted: list | None = None  # the tensors the fit wrote


@dataclass(frozen=True, kw_only=True)
class HeldOutCosines:
    """The mean cosine of the mean-pooled sentence embeddings to BERT's on the held-out texts."""

    copy: float | None = None
    fit: float | None = None


@dataclass(frozen=True, kw_only=True)
class ConversionRecord:
    """The record, field for field as conversion.json holds it (in this order)."""

    FILE_NAME: ClassVar[str] = "conversion.json"

    bert: str | None = None  # a Hub id as given; a local folder by its name only
    bert_license: str | None = None  # from BERT's card
    attention_type: str | None = None
    calibration: str | list | None = None  # the calibration files' names, or the embedded text's description
    fit_texts: int | None = None
    held_out_texts: int | None = None
    layers: tuple[LayerFit, ...] = ()
    held_out_mean_cosine: HeldOutCosines = HeldOutCosines()
    new_parameters: list | None = None  # the tensors the attention type adds, which BERT has not

    def to_json(self) -> dict:
        """The file's JSON object, the fields in order (a field an older record lacked as null)."""
        return {**asdict(self), "layers": [asdict(row) for row in self.layers]}

    def write(self, folder: str | Path) -> Path:
        """Writes FOLDER/conversion.json atomically; returns its path. A failed write raises its OSError."""
        path = Path(folder) / self.FILE_NAME
        content = json.dumps(self.to_json(), indent=2) + "\n"
        write_atomically(path, lambda file: file.write(content))
        return path

    @classmethod
    def read(cls, folder: str | Path) -> "ConversionRecord | None":
        """FOLDER/conversion.json, checked (`from_json`); None where the folder has none."""
        path = Path(folder) / cls.FILE_NAME
        return cls.from_json(path, read_json(path)) if path.is_file() else None

    @classmethod
    def from_json(cls, path: Path, data: Any, field: str = "conversion") -> "ConversionRecord":
        """The record `data` read from `path` (`field`: where in that file it stands), refused unless what a card
        shows of it is sound: layer rows with an integer index and finite errors, the held-out cosines numbers in
        [-1, 1], the licence a licence id."""
        data = mapping(path, field, data)
        if data.get("bert_license") is not None:
            plain_text(path, f"{field}.bert_license", data["bert_license"], NAME, LICENCE_RULE)
        layers = data.get("layers") or []
        if not isinstance(layers, list):
            raise UserError(f"{path}: {field}.layers is a JSON {type(layers).__name__}, not a list of rows.")
        rows = []
        for i, row in enumerate(layers):
            row = mapping(path, f"{field}.layers[{i}]", row)
            number(path, f"{field}.layers[{i}].layer", row.get("layer"), 0, integer=True)
            for key in ("copy_error", "fit_error"):
                if key in row:
                    number(path, f"{field}.layers[{i}].{key}", row[key], 0.0)
            rows.append(LayerFit(**known(LayerFit, row)))
        cosine = mapping(path, f"{field}.held_out_mean_cosine", data.get("held_out_mean_cosine") or {})
        for key in ("copy", "fit"):
            if key in cosine:
                number(path, f"{field}.held_out_mean_cosine.{key}", cosine[key], -1.0, 1.0)
        values = known(cls, data) | {
            "layers": tuple(rows),
            "held_out_mean_cosine": HeldOutCosines(**known(HeldOutCosines, cosine)),
        }
        return cls(**values)

    @property
    def layers_fitted(self) -> int:
        """The layers whose fit was kept (it beat copying)."""
        return sum(row.kept == "fit" for row in self.layers)


def known(record_class: type, data: dict) -> dict:
    """The items of `data` that are fields of `record_class` (a later version's extra fields are not read)."""
    names = {field.name for field in fields(record_class)}
    return {key: value for key, value in data.items() if key in names}
