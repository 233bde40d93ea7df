"""training_summary.json's "made_from": what a model was made from, for a run started from a converted model
(`symbert-pretrain --init_from`, with symbert-convert's record of the conversion) or distilled toward a teacher
(`--teacher`). Built by the run (distillation.made_from_record), written in its training summary, read back by the
release with every value the card shows checked: a bad one is one line naming the file and the field."""

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..json_files import LICENCE_RULE, NAME, mapping, plain_text
from ..tools.conversion_record import ConversionRecord, known


@dataclass(frozen=True, kw_only=True)
class Teacher:
    """The teacher distilled toward: its name (a Hub id as given, a local folder by its name only), its card's
    licence, its class, and whether it has an MLM head (then the distillation trained the student's)."""

    name: str | None = None
    license: str | None = None
    architecture: str | None = None
    mlm_head: bool | None = None


@dataclass(frozen=True, kw_only=True)
class MadeFromRecord:
    """The record, field for field as training_summary.json's "made_from" holds it (in this order)."""

    init_from: str | None = None
    conversion: ConversionRecord | None = None  # the --init_from folder's conversion.json
    teacher: Teacher | None = None

    def to_json(self) -> dict:
        return {
            "init_from": self.init_from,
            "conversion": None if self.conversion is None else self.conversion.to_json(),
            "teacher": None if self.teacher is None else asdict(self.teacher),
        }

    @classmethod
    def from_json(cls, path: Path, data: Any) -> "MadeFromRecord":
        """The record `data` of the summary `path`, refused unless a card can show it: the teacher an object whose
        licence and class are names, the conversion as `ConversionRecord.from_json` reads it."""
        data = mapping(path, "made_from", data)
        teacher = mapping(path, "made_from.teacher", data.get("teacher") or {})
        for key in ("license", "architecture"):
            if teacher.get(key) is not None:
                plain_text(path, f"made_from.teacher.{key}", teacher[key], NAME, LICENCE_RULE)
        conversion = data.get("conversion")
        return cls(
            init_from=data.get("init_from"),
            conversion=None
            if conversion is None
            else ConversionRecord.from_json(path, conversion, "made_from.conversion"),
            teacher=Teacher(**known(Teacher, teacher)) if teacher else None,
        )
