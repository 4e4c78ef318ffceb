"""The `dp` command: a registry of command families.

Each family is a module of libdp with ``add_commands(subparsers, common)``: it adds its
subcommands, each with ``set_defaults(func=...)``, and takes the options every
modeled benchmark shares from the parent parsers in `common` (`common_parsers`), so a
new family is one line in `FAMILIES`. ``dp COMMAND --help`` lists each command's
options; ``dp --help`` lists the commands.

Errors: a misuse (`OSError`, `ValueError`) ends the command with one line on stderr
and exit status 1; argument errors are usage errors (status 2); ``--debug`` shows the
traceback instead.
"""
from __future__ import annotations

import argparse
import errno
import importlib
import sys

from libdp._argtypes import plot_file, positive_int

__all__ = ["main", "build_parser", "common_parsers", "run_captured", "FAMILIES"]

# The command families, in the order ``dp --help`` lists them.
FAMILIES = (
    "libdp._dp_cli",        # pingpong, bandwidth, bibw
    "libdp._am_cli",        # am-pingpong, am-bandwidth, am-stress
    "libdp._fm_cli",        # fm-pingpong, fm-bandwidth
    "libdp._lci_cli",       # lci-logp, lci-pingpong, lci-bandwidth
    "libdp._lci_mcast_cli", # lci-bcast, lci-fa
    "libdp._info_cli",      # profile, modules, modinfo
    "libdp._fuzz",          # fuzz
    "libdp._tools_cli",     # reproduce, plot
    "libdp._node_cli",      # node, cluster, insmod, rmmod, lsmod, run: real nodes
)


def common_parsers() -> dict[str, argparse.ArgumentParser]:
    """Parent parsers for options shared across families (``parents=[common["model"]]``).

    ``model``: what every modeled run takes -- ``--platform``, ``--param``, ``--load``,
    ``--seed``; the output options ``--stats``, ``--json``, ``--plot``, ``--quiet``; and
    the sweep options ``--sweep``, ``--jobs``, ``--scheduler`` (`libdp._sweep` runs the
    command once per point; a family does nothing for it). Families set their own
    ``--platform`` default and help through `set_defaults` when the NIC fixes it.
    """
    from kernelsim import available_profiles

    model = argparse.ArgumentParser(add_help=False)
    g = model.add_argument_group("model options")
    g.add_argument("--platform", default=None,
                   help=f"platform profile ({', '.join(available_profiles())}; default: the NIC's)")
    g.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="override a platform-profile value, e.g. link.rate_bps=10e6 (repeatable)")
    g.add_argument("--load", action="append", default=[], metavar="NAME[:key=value,...]",
                   help="load a kernel module into every node, or give a boot module parameters (repeatable)")
    g.add_argument("--seed", type=int, default=0, help="random seed of the modeled run (default: 0)")
    out = model.add_argument_group("output")
    out.add_argument("--stats", action="store_true", help="also print the counters of every ring, pool and queue")
    out.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    out.add_argument("--plot", metavar="FILE.png|svg", type=plot_file, default=None,
                     help="also draw the results (with the published figures beside them) into FILE "
                          "(needs matplotlib: pip install 'dp[plot]')")
    out.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    sw = model.add_argument_group("sweeps")
    sw.add_argument("--sweep", action="append", default=[], metavar="KEY=V1,V2,...",
                    help="run once per value of a profile (or module) parameter; repeatable: every "
                         "combination; one merged JSON document, table and plot")
    sw.add_argument("--jobs", type=positive_int, default=1, metavar="N",
                    help="with --sweep: run the points in N local processes (default 1)")
    sw.add_argument("--scheduler", default=None, metavar="ADDRESS",
                    help="with --sweep: run the points on this Dask cluster (tcp://host:8786; "
                         "needs pip install 'dp[cluster]')")
    return {"model": model}


class _Parser(argparse.ArgumentParser):
    """An argument error is one line on stderr (status 2), not a usage block."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (usage: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dp", description="Directed Point, rebuilt: modeled and real cluster "
                                                            "messaging")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an error (accepted anywhere on the command line)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = common_parsers()
    for family in FAMILIES:
        importlib.import_module(family).add_commands(sub, common)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    end = argv.index("--") if "--" in argv else len(argv)
    debug = "--debug" in argv[:end]
    argv = [a for i, a in enumerate(argv) if not (a == "--debug" and i < end)]
    parser = build_parser()
    args = parser.parse_args(argv)
    args.debug = debug
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        if getattr(args, "sweep", None):
            from libdp._sweep import run_sweep
            return run_sweep(args, argv)
        if getattr(args, "jobs", 1) != 1 or getattr(args, "scheduler", None):
            raise OSError(errno.EINVAL, "--jobs and --scheduler run the points of a --sweep: give --sweep KEY=V1,V2")
        return func(args)
    except KeyboardInterrupt:
        return 130
    except (OSError, ValueError, BaseExceptionGroup) as exc:
        leaves = _leaves(exc)
        if args.debug or not all(isinstance(e, (OSError, ValueError)) for e in leaves):
            raise
        print(f"dp: {'; '.join(dict.fromkeys(_one_line(e) for e in leaves))}", file=sys.stderr)
        return 1


def run_captured(argv) -> tuple[dict, object]:
    """Run ``dp ARGV`` in this process; return its (document, `Table` or None) unprinted.

    What sweeps and ``dp reproduce`` run for each point (also in a worker process or on
    a Dask worker); errors propagate as OSError/ValueError.
    """
    from libdp._report import capture

    parser = build_parser()
    try:
        args = parser.parse_args(list(argv))
    except SystemExit:
        raise ValueError(f"dp {' '.join(argv)}: bad arguments") from None
    args.debug, args.sweep, args.plot, args.jobs, args.scheduler = False, [], None, 1, None
    if getattr(args, "func", None) is None:
        raise ValueError(f"dp {' '.join(argv)}: no command")
    with capture() as got:
        args.func(args)
    if not got:
        raise ValueError(f"dp {' '.join(argv)} printed no document")
    return got[-1]


def _leaves(exc: BaseException) -> list[BaseException]:
    """The errors inside nested exception groups (several ranks can fail the same way)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


def _one_line(exc: BaseException) -> str:
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return " ".join(str(text).split()) or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
