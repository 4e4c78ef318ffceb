"""``dp profile``, ``dp modules``, ``dp modinfo``: what a platform and the modules are."""
from __future__ import annotations

import json
import sys

from kernelsim import available_modules, find_module, load_profile

__all__ = ["add_commands"]


def add_commands(sub, common) -> None:
    p = sub.add_parser("profile", help="show a platform profile's values and sources")
    p.add_argument("name", nargs="?", default="p133")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_profile)
    p = sub.add_parser("modules", help="list every available kernel module")
    p.set_defaults(func=_modules)
    p = sub.add_parser("modinfo", help="show a module's description, parameters and sources")
    p.add_argument("name")
    p.add_argument("--node", default=None, metavar="NID", help="ask a running node (see dp cluster up)")
    p.add_argument("--cluster", default=None, metavar="FILE", help="with --node: the cluster file")
    p.set_defaults(func=_modinfo)


def _profile(args):
    prof = load_profile(args.name)
    if args.json:
        json.dump({k: {"value": prof.entry(k).value, "unit": prof.entry(k).unit, "source": prof.entry(k).source}
                   for k in sorted(prof.keys())}, sys.stdout, indent=1)
        print()
        return 0
    print(f"# {prof.name}: {prof.description}")
    for k in sorted(prof.keys()):
        e = prof.entry(k)
        print(f"{k:<24} {e.value!s:>12} {e.unit:<8} {e.source}")
    return 0


def _modules(_args):
    for name in sorted(available_modules()):
        try:
            desc = find_module(name).description
        except OSError as exc:
            desc = f"(cannot be loaded: {exc.strerror})"
        print(f"{name:<12} {desc}")
    return 0


def _modinfo(args):
    if args.node is not None:
        from libdp._attach import NodeLink
        from libdp._realnode import find_cluster
        cluster = find_cluster(args.cluster)
        link = NodeLink.connect(cluster.socket_path(int(args.node)), name="dp-modinfo")
        try:
            info = link.admin("modinfo", name=args.name)
        finally:
            link.close()
    else:
        info = find_module(args.name).info()
    print(f"name:        {info['name']}")
    print(f"description: {info['description']}")
    print(f"depends:     {', '.join(info['depends']) or '-'}")
    print(f"sources:     {', '.join(info['sources']) or '-'}")
    for k, p in info["params"].items():
        print(f"parm:        {k}:{p['help']} ({p['type']}, default {p['default']!r})")
    return 0
