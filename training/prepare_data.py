"""symbert-prepare-data: tokenise and cut a corpus into a folder of prepared blocks once (training/data/prepared.py), for
symbert-pretrain --blocks_dir to train from. It takes symbert-pretrain's data arguments, a recipe's included.

    symbert-prepare-data --recipe cpu-demo --output_dir data/cpu-demo --num_proc 2
    symbert-pretrain --recipe cpu-demo --blocks_dir data/cpu-demo --output_dir outputs/from-blocks
"""

from ..cli import UserError, run_command
from .arguments import argument_names, parse_arguments
from .data.prepared import prepare


def main(argv: list[str] | None = None) -> None:
    run_command(run, argv)


def run(argv: list[str]) -> None:
    if "blocks_dir" in argument_names(argv):
        raise UserError("symbert-prepare-data writes a blocks folder: pass --output_dir, not --blocks_dir.")
    _, _, data_args, training_args = parse_arguments(argv, usage=__doc__)
    manifest = prepare(data_args, training_args.output_dir, seed=training_args.seed)
    print(
        f"Prepared {manifest['train']['blocks']:,} training and {manifest['held_out']['blocks']:,} held-out blocks of "
        f"{manifest['block_length']} tokens from {manifest['source']} in {training_args.output_dir}"
    )


if __name__ == "__main__":
    main()
