"""``lmra names build``: rebuild ``names/*.csv`` from the SSA and Tzioumis data packages
(:mod:`lmra.namelists`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from lmra.cli.commands import COMMANDS
from lmra.console import lit, make_console


def cmd_names_build(args: argparse.Namespace) -> int:
    """``lmra names build [--out DIR]``: write the name lists to DIR (default ``names``)."""
    from lmra import namelists

    namelists.write_all(Path(args.out))
    make_console().print(f"wrote name lists to {lit(args.out)}")
    return 0


def add_parsers(sub) -> None:
    """Register ``lmra names build`` on the ``lmra`` sub-parser collection."""
    n = sub.add_parser("names", help=COMMANDS["names"].help)
    nsub = n.add_subparsers(dest="names_command", required=True)
    nb = nsub.add_parser("build", help="regenerate names/*.csv from the SSA and Tzioumis data packages "
                                       "(pip install 'lmra[names]')")
    nb.add_argument("--out", default="names", metavar="DIR", help="folder to write gender.csv and race_gender.csv to (default: names)")
    nb.set_defaults(func=cmd_names_build)
