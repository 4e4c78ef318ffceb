"""Cluster files: the nodes of a real cluster, and where each one's run directory is.

A cluster file is TOML. ``[cluster]`` says what every node runs; one ``[[node]]`` table
per node says where it is and how the transport reaches it::

    [cluster]
    name = "lab"                 # names the run directory and the shared-memory rings
    nic = "dec21140"             # the NIC model every node carries
    platform = "p133"            # optional: the NIC's own platform by default
    transport = "udp"            # shm (one host) | udp (hosts) | packet (raw Ethernet)
    params = ["fault.loss=0.01"] # optional: profile overrides every node applies
    load = ["am"]                # optional: modules every node loads at start
    run_dir = "/run/dp/lab"      # optional: default <base>/<name> (see run_base)

    [[node]]
    nid = 0
    host = "10.0.0.1"            # where the node runs (informative for shm and packet)
    addr = "10.0.0.1:47000"      # udp: the node's socket
    # packet: iface = "eth1", mac = "02:00:d9:00:00:00", netns = "..." (a cluster in a box)
    cpu = 0                      # optional: pin the node process to this CPU (see placement)

Every node loads the whole table into its NART: the NIC's address of node ``nid`` is
``hwaddr_for(nid)`` of the NIC package (for Ethernet, a locally administered MAC the
file can state as ``mac``; a node's interface carries it).

Run directories hold, per node, the control socket ``node<NID>.sock``, the pid file
``node<NID>.pid`` and, for a detached node, ``node<NID>.log``; the cluster file itself
as ``cluster.toml`` when ``dp cluster up`` made it. They are 0700: other users cannot
reach the nodes.
"""
from __future__ import annotations

import errno
import os
import tomllib

__all__ = ["ClusterFile", "NodeSpec", "run_base", "default_run_dir", "TRANSPORTS", "node_from_environment"]

TRANSPORTS = ("shm", "udp", "packet")
RANK_VARIABLES = ("DP_NODE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")


def run_base() -> str:
    """Where run directories go: $DP_RUN_BASE, else /run/dp for root, else $XDG_RUNTIME_DIR/dp, else /tmp/dp-UID."""
    base = os.environ.get("DP_RUN_BASE")
    if base:
        return base
    if os.geteuid() == 0 and os.path.isdir("/run"):
        return "/run/dp"
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return os.path.join(xdg, "dp")
    return f"/tmp/dp-{os.geteuid()}"


def default_run_dir(name: str = "default") -> str:
    return os.path.join(run_base(), name)


def node_from_environment() -> int | None:
    """The node a process belongs to: DP_NODE, or the rank an MPI or Slurm launcher gave it."""
    for var in RANK_VARIABLES:
        v = os.environ.get(var)
        if v is not None and v.strip():
            try:
                return int(v)
            except ValueError:
                raise OSError(errno.EINVAL, f"{var}={v!r} is not a node number") from None
    return None


class NodeSpec:
    __slots__ = ("nid", "host", "addr", "iface", "mac", "netns", "cpu")

    def __init__(self, nid, host="localhost", addr=None, iface=None, mac=None, netns=None, cpu=None):
        self.nid, self.host, self.addr, self.iface, self.mac, self.netns = nid, host, addr, iface, mac, netns
        self.cpu = cpu                  # the CPU the node process is pinned to (None: wherever the OS puts it)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__ if getattr(self, k) is not None}


class ClusterFile:
    def __init__(self, name: str, nic: str, transport: str, nodes: list[NodeSpec], *, platform=None, params=(),
                 load=(), run_dir=None, extra=None, path=None):
        if not name or not all(c.isalnum() or c in "-_." for c in name) or len(name) > 64:
            raise OSError(errno.EINVAL, f"cluster name {name!r}: letters, digits, '-', '_' and '.', at most 64")
        if transport not in TRANSPORTS:
            raise OSError(errno.EINVAL, f"transport is one of {', '.join(TRANSPORTS)}, not {transport!r}")
        if not nodes:
            raise OSError(errno.EINVAL, "a cluster file lists at least one [[node]]")
        nids = [n.nid for n in nodes]
        if len(set(nids)) != len(nids):
            raise OSError(errno.EINVAL, "two [[node]] tables have the same nid")
        for n in nodes:
            if not isinstance(n.nid, int) or isinstance(n.nid, bool) or not 0 <= n.nid <= 0xFFFF:
                raise OSError(errno.EINVAL, f"nid must be an integer 0..65535, not {n.nid!r}")
            if transport == "udp" and not n.addr:
                raise OSError(errno.EINVAL, f"node {n.nid}: the udp transport needs addr = \"HOST:PORT\"")
            if transport == "packet" and not n.iface:
                raise OSError(errno.EINVAL, f"node {n.nid}: the packet transport needs iface")
            if n.cpu is not None and (not isinstance(n.cpu, int) or isinstance(n.cpu, bool) or n.cpu < 0):
                raise OSError(errno.EINVAL, f"node {n.nid}: cpu is a CPU number, not {n.cpu!r}")
        self.name = name
        self.nic = nic
        self.platform = platform
        self.transport = transport
        self.nodes = sorted(nodes, key=lambda n: n.nid)
        self.params = [str(p) for p in params]
        self.load = [str(m) for m in load]
        self.run_dir = run_dir or default_run_dir(name)
        self.extra = dict(extra or {})          # what `dp cluster up` records (namespaces, faults)
        self.path = path

    # -- reading and writing -----------------------------------------------------------------

    @classmethod
    def load(cls, path: str) -> "ClusterFile":
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except FileNotFoundError:
            raise OSError(errno.ENOENT, f"no cluster file {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise OSError(errno.EINVAL, f"cluster file {path}: {exc}") from None
        c = doc.get("cluster")
        if not isinstance(c, dict):
            raise OSError(errno.EINVAL, f"cluster file {path}: no [cluster] table")
        raw = doc.get("node")
        if not isinstance(raw, list):
            raise OSError(errno.EINVAL, f"cluster file {path}: no [[node]] tables")
        nodes = []
        for t in raw:
            unknown = set(t) - set(NodeSpec.__slots__)
            if unknown:
                raise OSError(errno.EINVAL, f"cluster file {path}: unknown node keys {sorted(unknown)}")
            if "nid" not in t:
                raise OSError(errno.EINVAL, f"cluster file {path}: a [[node]] without nid")
            nodes.append(NodeSpec(**t))
        known = {"name", "nic", "platform", "transport", "params", "load", "run_dir"}
        extra = {k: v for k, v in c.items() if k not in known}
        return cls(c.get("name", "default"), c.get("nic", "dec21140"), c.get("transport", "shm"), nodes,
                   platform=c.get("platform"), params=c.get("params", ()), load=c.get("load", ()),
                   run_dir=c.get("run_dir"), extra=extra, path=os.path.abspath(path))

    def dumps(self) -> str:
        lines = ["# dp cluster file", "[cluster]"]
        head = {"name": self.name, "nic": self.nic, "platform": self.platform, "transport": self.transport,
                "params": self.params, "load": self.load, "run_dir": self.run_dir, **self.extra}
        lines += [f"{k} = {_toml(v)}" for k, v in head.items() if v is not None]
        for n in self.nodes:
            lines += ["", "[[node]]"] + [f"{k} = {_toml(v)}" for k, v in n.as_dict().items()]
        return "\n".join(lines) + "\n"

    def save(self, path: str) -> None:
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(self.dumps())
        os.replace(tmp, path)
        self.path = os.path.abspath(path)

    # -- using -----------------------------------------------------------------------------------

    def node(self, nid: int) -> NodeSpec:
        for n in self.nodes:
            if n.nid == nid:
                return n
        raise OSError(errno.EINVAL, f"no node {nid} in cluster {self.name!r} (nodes {self.nids()})")

    def nids(self) -> list[int]:
        return [n.nid for n in self.nodes]

    def socket_path(self, nid: int) -> str:
        return node_socket(self.run_dir, nid)

    def pid_path(self, nid: int) -> str:
        return os.path.join(self.run_dir, f"node{nid}.pid")

    def log_path(self, nid: int) -> str:
        return os.path.join(self.run_dir, f"node{nid}.log")


def node_socket(run_dir: str, nid: int) -> str:
    return os.path.join(run_dir, f"node{nid}.sock")


def make_run_dir(path: str) -> None:
    """Create the run directory (and its parents), mode 0700; EACCES if it is someone else's."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        st = os.stat(path)
        if st.st_uid != os.geteuid():
            raise OSError(errno.EACCES, f"run directory {path} belongs to uid {st.st_uid}") from None
    os.chmod(path, 0o700)


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {v!r} to TOML")


def _key(k: str) -> str:
    return k if all(c.isalnum() or c in "-_" for c in k) else _toml(k)
