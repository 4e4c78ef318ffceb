"""``dp node``, ``dp cluster``, ``dp run`` and ``dp insmod/rmmod/lsmod``: real nodes (and module
commands on a modeled node).

    dp cluster up --nodes 4 [--transport shm|udp|packet] [--nic NIC] [--load am] [--name NAME]
    dp cluster status [--cluster FILE]
    dp insmod am --node all            # or --node 0; rmmod, lsmod, modinfo --node too
    dp lsmod --platform p3_1000_lanai9 --load lci:variant=I-hrx   # without --node: a modeled node
    dp run -n 4 script.py ARGS...      # one copy per node, DP_NODE and DP_RUN_DIR set
    dp cluster down [--cluster FILE]

    dp node start --id 0 --cluster FILE [--detach]   # one node of a cluster file (any host)
    dp node stop 0 [--cluster FILE];  dp node status [--cluster FILE]

Which cluster: ``--cluster FILE``, else ``$DP_CLUSTER``, else ``$DP_RUN_DIR/cluster.toml``,
else the cluster named ``--name`` (default ``default``) that ``dp cluster up`` made.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time

from libdp._argtypes import positive_int

__all__ = ["add_commands"]


def _cluster_opts(p, name=True):
    p.add_argument("--cluster", default=None, metavar="FILE", help="the cluster file (default: the running cluster's)")
    if name:
        p.add_argument("--name", default="default", help="cluster name (default: default)")


def add_commands(sub, common) -> None:
    p = sub.add_parser("node", help="run, stop or inspect one real node (a process running a kernel)")
    nsub = p.add_subparsers(dest="node_command", metavar="start|stop|status", required=True)
    q = nsub.add_parser("start", help="run node --id of a cluster file (foreground, or --detach)")
    q.add_argument("--id", type=int, required=True, metavar="NID")
    q.add_argument("--cluster", required=True, metavar="FILE")
    q.add_argument("--detach", action="store_true", help="run in the background (pid and log in the run directory)")
    q.add_argument("--cpu", type=int, default=None, metavar="N",
                   help="pin the node process to CPU N (default: the cluster file's cpu for the node, else unpinned)")
    q.add_argument("--ready-fd", type=int, default=None, help=argparse_hidden())
    q.add_argument("--tied-to", type=int, default=None, help=argparse_hidden())
    q.set_defaults(func=_node_start)
    q = nsub.add_parser("stop", help="stop a node (SIGTERM; SIGKILL if it does not end)")
    q.add_argument("nid", type=int)
    _cluster_opts(q)
    q.set_defaults(func=_node_stop)
    q = nsub.add_parser("status", help="what each node of the cluster runs: modules, processes, endpoints")
    _cluster_opts(q)
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=_status)

    p = sub.add_parser("cluster", help="bring a cluster of real nodes on this host up and down")
    csub = p.add_subparsers(dest="cluster_command", metavar="up|down|status", required=True)
    q = csub.add_parser("up", help="start N nodes on this host (shm, udp on loopback, or packet: netns + bridge)",
                        parents=[common["model"]])
    q.add_argument("--nodes", "-n", type=positive_int, default=2)
    q.add_argument("--transport", choices=("shm", "udp", "packet"), default="shm")
    q.add_argument("--nic", default=None, help="NIC model of every node (default: the platform's)")
    q.add_argument("--name", default=None, help="cluster name (default: default, or $DP_RUN_DIR's last part)")
    q.add_argument("--run-dir", default=None,
                   help="run directory (default: <run base>/<name>; without --name, $DP_RUN_DIR if set "
                        "-- where the other commands look -- and the cluster is named as that directory)")
    q.add_argument("--spin-us", type=float, default=None, metavar="US",
                   help="how long an idle node polls before it sleeps (default: 1000 with 4 CPUs or more, or "
                        "with cross or pair placement and a CPU per node; else 0)")
    q.add_argument("--placement", choices=("auto", "cross", "pair", "none"), default="auto",
                   help="cross: node i pinned to CPU i, its scripts on the next node's CPU; pair: node i "
                        "pinned to CPU i, its scripts beside it; none: the OS places them; auto (default): "
                        "cross when the host has fewer CPUs than 2 x nodes (pair on one CPU)")
    q.set_defaults(func=_cluster_up)
    q = csub.add_parser("down", help="stop every node and remove every namespace, ring and file the cluster made")
    _cluster_opts(q)
    q.set_defaults(func=_cluster_down)
    q = csub.add_parser("status", help="every node: up or down, modules, processes, endpoints")
    _cluster_opts(q)
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=_status)

    for cmd, help_text in (("insmod", "load a module into running nodes (or a modeled node: check it loads)"),
                           ("rmmod", "unload a module from running nodes (EBUSY while in use)"),
                           ("lsmod", "list the modules of running nodes (or of a modeled node)")):
        q = sub.add_parser(cmd, help=help_text)
        if cmd != "lsmod":
            q.add_argument("module")
        if cmd == "insmod":
            q.add_argument("params", nargs="*", metavar="KEY=VALUE")
        q.add_argument("--node", default=None, metavar="NID|all",
                       help="a running node, or all of the cluster's (without it: a modeled node, below)")
        _cluster_opts(q)
        m = q.add_argument_group("a modeled node (without --node): booted for this command, as "
                                 "a benchmark's nodes are, to check modules and their parameters")
        m.add_argument("--platform", default=None, help="platform profile (default: the NIC's)")
        m.add_argument("--nic", default=None, help="NIC (default: the platform's)")
        m.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                       help="override a platform-profile value (repeatable)")
        m.add_argument("--load", action="append", default=[], metavar="NAME[:key=value,...]",
                       help="modules the node boots with, before this command (repeatable)")
        q.add_argument("--json", action="store_true")
        q.set_defaults(func=_modcmd, modcmd=cmd)

    p = sub.add_parser("run", help="run a script once per node of a cluster (DP_NODE, DP_RUN_DIR set)")
    p.add_argument("-n", "--nodes", type=positive_int, required=True)
    p.add_argument("--cluster", default=None, metavar="FILE",
                   help="a running cluster (default: the running one, else a temporary shm cluster of -n nodes)")
    p.add_argument("--transport", choices=("shm", "udp", "packet"), default="shm",
                   help="transport of the temporary cluster")
    p.add_argument("--nic", default=None)
    p.add_argument("--load", action="append", default=[], metavar="NAME[:k=v,...]",
                   help="modules the temporary cluster's nodes load")
    p.add_argument("script")
    p.add_argument("args", nargs="...")
    p.set_defaults(func=_run)


def argparse_hidden():
    import argparse
    return argparse.SUPPRESS


def _find(args):
    from libdp._realnode import find_cluster
    return find_cluster(getattr(args, "cluster", None), getattr(args, "name", "default"))


def _nodes(cluster, which: str) -> list[int]:
    if which == "all":
        return cluster.nids()
    try:
        nid = int(which)
    except ValueError:
        raise OSError(errno.EINVAL, f"--node is a node id or 'all', not {which!r}") from None
    cluster.node(nid)
    return [nid]


# --------------------------------------------------------------------------- dp node


def _node_start(args) -> int:
    from libdp._clusterfile import ClusterFile
    from libdp._realnode import serve_node, start_node
    cluster = ClusterFile.load(args.cluster)
    if args.detach:
        pid = start_node(cluster, args.id, cpu=args.cpu)
        print(f"node {args.id} of cluster {cluster.name!r}: pid {pid}, socket {cluster.socket_path(args.id)}, "
              f"log {cluster.log_path(args.id)}")
        return 0
    ready = None
    if args.ready_fd is not None:
        fd = args.ready_fd

        def ready():
            os.write(fd, b"ok\n")
            os.close(fd)
    serve_node(cluster, args.id, ready=ready, tied_to=args.tied_to, cpu=args.cpu)
    return 0


def _node_stop(args) -> int:
    from libdp._realnode import stop_node
    cluster = _find(args)
    if not stop_node(cluster, args.nid):
        raise OSError(errno.ESRCH, f"node {args.nid} of cluster {cluster.name!r} is not running")
    return 0


def _status(args) -> int:
    from libdp._realnode import cluster_status
    cluster = _find(args)
    nodes = cluster_status(cluster)
    if args.json:
        json.dump({"cluster": cluster.name, "transport": cluster.transport, "nic": cluster.nic,
                   "run_dir": cluster.run_dir, "nodes": nodes}, sys.stdout, indent=1, default=str)
        print()
        return 0
    print(f"# cluster {cluster.name!r}: {len(cluster.nodes)} nodes, {cluster.nic} over {cluster.transport}, "
          f"placement {cluster.extra.get('placement', 'none')}, run directory {cluster.run_dir}")
    for st in nodes:
        if st.get("state") != "up":
            print(f"node {st['nid']}: {st['state']}")
            continue
        mods = ", ".join(f"{m['name']}({m['use_count']})" if m.get("use_count") else m["name"]
                         for m in st["modules"])
        print(f"node {st['nid']}: up, pid {st['pid']}{_where(st)}, modules {mods}")
        loop = st.get("loop")
        if loop:
            print(f"  loop: busy {loop['busy_s']:.3f} s in {loop['busy_passes']} of {loop['passes']} passes, "
                  f"slept {loop['sleeps']} times"
                  + (f", stopped polling {loop['crowded']} times on a crowded core" if loop.get("crowded") else ""))
        for p in st["processes"]:
            eps = ", ".join(f"ep {f['ep']}" if "ep" in f else f["kind"] for f in p["files"]) or "no files"
            print(f"  process {p['pid']} ({p['name']}): {eps}")
    return 0


def _where(st: dict) -> str:
    """Where a node runs and where the scripts attaching to it go (`plan_placement`)."""
    cpu, scripts = st.get("cpu"), st.get("script_cpu")
    if cpu is None:
        return ""
    if scripts is None:
        return f", CPU {cpu}"
    return f", CPU {cpu} (its scripts {'beside it' if scripts == cpu else f'on CPU {scripts}'})"


# --------------------------------------------------------------------------- dp cluster


def _cluster_up(args) -> int:
    from libdp._realnode import cluster_up
    params = list(args.param)
    # An exported DP_RUN_DIR is where every later command looks for the cluster, so without
    # --name the cluster goes there, named as its directory (the inverse of <run base>/<name>).
    name, run_dir = args.name, args.run_dir
    if name is None and run_dir is None and os.environ.get("DP_RUN_DIR"):
        run_dir = os.environ["DP_RUN_DIR"]
        name = os.path.basename(os.path.normpath(run_dir))
    c = cluster_up(args.nodes, name=name or "default", transport=args.transport, nic=args.nic,
                   platform=args.platform, params=params, load=args.load, run_dir=run_dir, seed=args.seed,
                   spin_s=None if args.spin_us is None else args.spin_us * 1e-6, placement=args.placement)
    print(f"cluster {c.name!r} up: {len(c.nodes)} nodes, {c.nic} over {c.transport}, "
          f"placement {c.extra.get('placement', 'none')}")
    print(f"cluster file: {c.path}")
    print(f"export DP_RUN_DIR={c.run_dir}")
    return 0


def _cluster_down(args) -> int:
    from libdp._realnode import cluster_down
    cluster = _find(args)
    done = cluster_down(cluster)
    print(f"cluster {cluster.name!r} down: stopped nodes {done['stopped'] or 'none'}, "
          f"{len(done['namespaces_removed'])} namespaces and {len(done['rings_removed'])} leftover rings removed")
    return 0


# --------------------------------------------------------------------------- modules


def _modcmd(args) -> int:
    if args.node is None:
        if args.cluster is not None:
            raise OSError(errno.EINVAL, "--cluster names running nodes: give --node NID|all too "
                                        "(without --node the command acts on a modeled node)")
        return _print_modules(args, {0: _modeled_modcmd(args)}, modeled=True)
    given = [f"--{o}" for o in ("platform", "nic", "param", "load") if getattr(args, o)]
    if given:
        raise OSError(errno.EINVAL, f"{', '.join(given)}: a running node has its own platform and "
                                    f"modules; these options describe a modeled node (drop --node)")
    from libdp._attach import NodeLink
    cluster = _find(args)
    out = {}
    for nid in _nodes(cluster, args.node):
        link = NodeLink.connect(cluster.socket_path(nid), name=f"dp-{args.modcmd}")
        try:
            if args.modcmd == "insmod":
                out[nid] = link.admin("insmod", name=args.module, params=_module_params(args.params))
            elif args.modcmd == "rmmod":
                out[nid] = link.admin("rmmod", name=args.module)
            else:
                out[nid] = link.admin("lsmod")
        except OSError as exc:
            raise OSError(exc.errno, f"node {nid}: {exc.strerror}") from None
        finally:
            link.close()
    return _print_modules(args, out)


def _module_params(items) -> dict:
    params = {}
    for kv in items:
        k, sep, v = kv.partition("=")
        if not sep:
            raise OSError(errno.EINVAL, f"module parameters are KEY=VALUE, not {kv!r}")
        params[k] = v
    return params


def _modeled_modcmd(args) -> list:
    """The same module table operations on node 0 of a modeled two-node cluster, booted
    as a benchmark's nodes are (NIC driver, dp, then ``--load``; two, because some media
    join exactly two): insmod's parameter checks, rmmod's EBUSY and ENOENT and the use
    counts are the kernel's own, not a copy of them."""
    from libdp._cluster import Cluster
    mods = Cluster(nodes=2, platform=args.platform, nic=args.nic, params=args.param,
                   load=args.load).nodes[0].modules
    if args.modcmd == "insmod":
        mods.insmod(args.module, **_module_params(args.params))
    elif args.modcmd == "rmmod":
        mods.rmmod(args.module)
    return mods.lsmod()


def _print_modules(args, out: dict, modeled: bool = False) -> int:
    if args.json:
        json.dump({str(k): v for k, v in out.items()}, sys.stdout, indent=1, default=str)
        print()
        return 0
    if args.modcmd != "lsmod" and not modeled:
        return 0
    for nid, mods in out.items():
        print(f"# {'a modeled node' if modeled else f'node {nid}'}")
        print(f"{'Module':<12}{'Used by':>8}  Params")
        for m in mods:
            users = ",".join(m.get("used_by", [])) if isinstance(m.get("used_by"), list) else ""
            print(f"{m['name']:<12}{m.get('use_count', 0):>8}  {users} {m.get('params', {})}")
    return 0


# --------------------------------------------------------------------------- dp run


def _run(args) -> int:
    from libdp._realnode import cluster_down, cluster_up, find_cluster
    if not os.path.exists(args.script):
        raise OSError(errno.ENOENT, f"no script {args.script}")
    cluster, temporary = None, False
    if args.cluster or os.environ.get("DP_CLUSTER") or os.environ.get("DP_RUN_DIR"):
        cluster = find_cluster(args.cluster)
    else:
        try:
            cluster = find_cluster(None)
        except OSError:
            cluster = cluster_up(args.nodes, name=f"run{os.getpid()}", transport=args.transport, nic=args.nic,
                                 load=args.load, tied=True)
            temporary = True
    try:
        if args.nodes > len(cluster.nodes):
            raise OSError(errno.EINVAL, f"-n {args.nodes}: cluster {cluster.name!r} has {len(cluster.nodes)} nodes")
        return run_copies(cluster, args.nodes, [sys.executable, args.script, *args.args])
    finally:
        if temporary:
            cluster_down(cluster)


def run_copies(cluster, n: int, argv: list[str]) -> int:
    """One copy of `argv` per node 0..n-1; if one fails or dies the others are stopped and the
    run fails, naming it. Returns 0, or raises OSError with the first failure."""
    procs = {}
    for nid in cluster.nids()[:n]:
        env = {**os.environ, "DP_NODE": str(nid), "DP_NODES": str(n), "DP_RUN_DIR": cluster.run_dir}
        if cluster.path:
            env["DP_CLUSTER"] = cluster.path
        procs[nid] = subprocess.Popen(argv, env=env)
    pidfds = {os.pidfd_open(p.pid): nid for nid, p in procs.items()}
    failure = None
    try:
        import select
        waiting = dict(pidfds)
        while waiting and failure is None:
            ready, _, _ = select.select(list(waiting), [], [])
            for fd in ready:
                nid = waiting.pop(fd)
                code = procs[nid].wait()
                if code != 0:
                    failure = (nid, code)
                    break
    finally:
        for fd in pidfds:
            os.close(fd)
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        for p in procs.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    if failure is not None:
        nid, code = failure
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
        raise OSError(errno.ECONNRESET if code < 0 else errno.EIO, f"the copy on node {nid} {how}")
    return 0
