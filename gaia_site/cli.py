"""The ``gaia`` console script: ``gaia api|agents|keys|mesh|bench|docs ...``.

Wiring only: each group lives with its app. ``mesh`` imports nothing from Django, so
``gaia mesh ...`` never configures Django; nor does ``gaia bench`` (an HTTP client of the API);
the other groups do.
"""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gaia", description="Gaia agent server")
    sub = parser.add_subparsers(dest="group", required=True)

    from gaia_site import server_cli

    server_cli.register(sub)

    from mesh import cli as mesh_cli

    mesh_cli.register(sub)

    from benchmarks import cli as bench_cli

    bench_cli.register(sub)

    from gaia_site import docs_cli

    docs_cli.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
