"""The `glm5` command, one module a subcommand (asv's `commands/`): `sim` (the SGLang emulator, its own parser),
`bench` (one measurement outside pytest), `capacity` (the largest concurrency within an SLO), `compare` (two reports
judged as the A/B gate judges), `history` (trends and change points of a --glm5-history directory), `merge` (shard
reports joined into one run), `plan` (what resolving a series costs)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from types import ModuleType

from . import bench, capacity, compare, history, merge, plan

COMMANDS: dict[str, ModuleType] = {"bench": bench, "capacity": capacity, "compare": compare, "history": history,
                                   "merge": merge, "plan": plan}


def build_parser() -> argparse.ArgumentParser:
    """The `glm5` command's parser (`sim` takes SGLang's own flags, parsed by the emulator)."""
    parser = argparse.ArgumentParser(prog="glm5", description="pytest-glm5 command line")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("sim", help="run the SGLang 0.5.23 emulator (takes `sglang serve` flags and --sim-*)",
                   add_help=False)
    for module in COMMANDS.values():
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `glm5` console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "sim":
        from ..sim.lifecycle import main as sim_main

        return sim_main(args[1:])
    ns = build_parser().parse_args(args)
    run: Callable[[argparse.Namespace], int] = COMMANDS[ns.cmd].run
    return run(ns)
