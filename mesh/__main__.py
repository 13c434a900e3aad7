"""``python -m mesh run ...``: the ``gaia mesh`` group without the rest of ``gaia``."""

from __future__ import annotations

import argparse
import sys

from mesh import cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mesh")
    sub = parser.add_subparsers(dest="group", required=True)
    cli.register(sub)
    args = parser.parse_args(["mesh", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
