"""Real nodes and clusters: building a node process from a cluster file, starting and
stopping node processes, bringing a cluster in a box up and down.

* `serve_node` -- this process becomes node NID of a cluster: its NIC on the cluster's
  transport (`kernelsim.media.mesh`, or AF_PACKET on its interface -- inside its network
  namespace for a cluster in a box), its kernel booted with the NIC driver, DP and the
  cluster's modules, Token Buffer Pools in memory files (`MemfdRegion`), served by a
  `kernelsim.daemon.NodeServer` on ``<run_dir>/node<NID>.sock`` until SIGTERM/SIGINT.
* `run_as_node` -- this process becomes node NID and runs one program on it itself,
  without a node server (`run_real_spmd(kernel="rank")`): no other process can attach,
  and no hand-off to a node process lies between the program and its kernel.
* `start_node` -- the same in a new process (``dp node start --detach``): a fresh
  interpreter in a session of its own, its output in ``node<NID>.log``; returns once the
  node answers on its socket, or raises its error.
* `stop_node` -- SIGTERM, then SIGKILL if it lingers; the pid file carries the process's
  start time so a recycled pid is never signalled.
* `cluster_up` / `cluster_down` -- N nodes on one host: shared memory, UDP on loopback,
  or raw Ethernet between network namespaces joined by a bridge (pyroute2). Down removes
  every process, namespace, ring and file the cluster made -- also after a crash, from
  what the cluster file and the run directory record.
"""
from __future__ import annotations

import errno
import gc
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time

from kernelsim import DEFAULT_SPIN_S
from kernelsim.daemon import MemfdRegion, NodeServer
from kernelsim.media.backend import DevicePort
from kernelsim.media.faults import FaultInjector
from kernelsim.media.mesh import OnlyPeer, ShmMesh, UdpMesh, remove_cluster_rings
from libdp._clusterfile import ClusterFile, NodeSpec, make_run_dir
from libdp._cluster import Cluster, build_profile, resolve_platform
from nic_drivers import nic as nic_package

__all__ = ["serve_node", "run_as_node", "start_node", "stop_node", "node_status", "cluster_up", "cluster_down", "cluster_status",
           "frame_router", "plan_placement", "script_cpu", "PLACEMENTS", "READY_TIMEOUT_S"]

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
_BASE_PORT = 47000
PLACEMENTS = ("auto", "cross", "pair", "none")
PINNED = ("cross", "pair")     # placements that pin every node to a CPU and place its scripts
PINNED_NODE_SPIN_S = 1e-3


# --------------------------------------------------------------------------- placement


def plan_placement(nodes: int, placement: str = "auto", cpus=None) -> tuple[str, dict]:
    """Where the processes of a cluster in a box run: (placement, {nid: cpu}).

    ``cross`` and ``pair`` pin node i to CPU i (mod the CPUs this process may use) and
    differ in where a script that attaches to a node runs (`script_cpu`, `libdp.attach`):

    - ``cross``: on the next node's CPU. A script and its node are consecutive stages of
      every message's path (script -> gate -> node -> wire, and back), so on two cores
      they work at once -- a stream's writer posts the next messages while its node sends
      the last ones, and in a round trip the script waiting for its answer is no longer
      on the node's way -- while each core holds one stage of each direction. Crossed
      scripts poll before they sleep (the other node's work and their waits alternate).
    - ``pair``: on its node's CPU: a script's hand-off to its node and back is a wake-up
      on the core both run on (cache-hot, no inter-processor interrupt), but the two take
      turns on it; paired scripts sleep at once.

    ``none``: the OS places every process. ``auto``: where the host has fewer CPUs than
    a node and a script per node need (``2 * nodes``), ``cross`` (``pair`` on one CPU,
    where the two are the same), else ``none``. Measured on a loaded 2-core host
    (docs/real-nodes.md, "Placement"): a 1-byte round trip 34-42 µs crossed, 48-61 µs
    paired, 120 µs unpinned; a 1500-byte stream 248-312 MB/s crossed, 153-205 paired,
    159 unpinned.
    """
    if placement not in PLACEMENTS:
        raise OSError(errno.EINVAL, f"placement is one of {', '.join(PLACEMENTS)}, not {placement!r}")
    cpus = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
    if placement == "auto":
        placement = "none" if 2 * nodes <= len(cpus) else "cross" if len(cpus) > 1 else "pair"
    if placement == "none":
        return "none", {}
    return placement, {nid: cpus[nid % len(cpus)] for nid in range(nodes)}


def script_cpu(placement: str, cpu: int | None, node_cpus) -> int | None:
    """The CPU a script attached to a node pinned to `cpu` joins (None: it stays where it
    is), given the CPUs of all the cluster's nodes: `cpu` itself under ``pair``, the next
    of `node_cpus` after it (round) under ``cross``."""
    if placement not in PINNED or cpu is None:
        return None
    if placement == "pair":
        return cpu
    ring = sorted(set(node_cpus) | {cpu})
    return ring[(ring.index(cpu) + 1) % len(ring)]


def _pin(cpu: int, who: str) -> None:
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError as exc:
        raise OSError(exc.errno or errno.EINVAL, f"{who}: cannot run on CPU {cpu}: {exc.strerror}") from None


# --------------------------------------------------------------------------- one node


def frame_router(pkg, hosts: dict, nid: int):
    """``dest_of(frame) -> node id``: which node a frame of this NIC is addressed to."""
    peers = [p for p in hosts if p != nid]
    if len(peers) == 1:
        return OnlyPeer(peers[0])
    station_of = getattr(pkg, "frame_station", None)
    if station_of is None:
        raise OSError(errno.EINVAL, f"{pkg.__name__.split('.')[-1]} frames carry no address a real transport can "
                                    "route by: a real cluster of this NIC joins 2 nodes")
    table = {pkg.station_key(h[pkg.LINK_KIND]): n for n, h in hosts.items()}
    get = table.get
    return lambda frame: get(station_of(frame))


def _hosts(pkg, cluster: ClusterFile) -> dict:
    return {n.nid: {pkg.LINK_KIND: pkg.hwaddr_for(n.nid)} for n in cluster.nodes}


def _open_transport(cluster: ClusterFile, spec: NodeSpec, pkg, dest_of, max_frame: int):
    if cluster.transport == "shm":
        slots = 256 if len(cluster.nodes) <= 4 else 64
        return ShmMesh(cluster.name, spec.nid, cluster.nids(), dest_of, slots=slots, slot_bytes=max(8192, max_frame + 4))
    if cluster.transport == "udp":
        return UdpMesh.open(spec.nid, {n.nid: n.addr for n in cluster.nodes}, dest_of)
    if pkg.LINK_KIND != "ether":
        raise OSError(errno.EINVAL, "the packet transport carries Ethernet frames: use --nic dec21140")
    from kernelsim.media.packet import PacketPort
    if spec.netns:
        from pyroute2.netns import setns
        setns(spec.netns, flags=0)          # this process is the node's host from here on
    # A node's frames come through a receive ring shared with the kernel: its polls read memory.
    return PacketPort.open(spec.iface, rcvbuf=4 << 20, sndbuf=4 << 20, rx_ring=True)


def build_node(cluster: ClusterFile, nid: int, *, seed: int = 0):
    """Node `nid` of `cluster` in this process, real time, booted: (node, transport)."""
    spec = cluster.node(nid)
    platform, nic = resolve_platform(cluster.platform, cluster.nic)
    pkg = nic_package(nic)
    prof = build_profile(platform, cluster.params)
    hosts = _hosts(pkg, cluster)
    transport = _open_transport(cluster, spec, pkg, frame_router(pkg, hosts, nid), 8192)
    try:
        port = DevicePort(transport)
        node = Cluster.real_node(nid, hosts, port, platform=platform, nic=nic, params=cluster.params,
                                 load=cluster.load)
        node.engine.run()               # the boot's device work (the 21140's setup frame loads its address
        node.shared_allocator = MemfdRegion     # filter) is done before the first frame is taken
        by = cluster.extra.get("faults_by", "injector")
        if _faulty(prof) and by == "injector":
            port.inject_faults(FaultInjector(node.profile, random.Random(seed * 1_000_003 + nid)))
        elif _faulty(prof):
            from libdp._realrun import link_shape
            port.faults_elsewhere = {"applied_by": by, **link_shape(prof).as_dict()}
    except BaseException:
        transport.close()
        raise
    return node, transport


def _faulty(prof) -> bool:
    return any(prof.get(k, 0.0) for k in ("fault.loss", "fault.corrupt", "fault.duplicate", "fault.reorder"))


def serve_node(cluster: ClusterFile, nid: int, *, ready=None, spin_s: float | None = None,
               tied_to: int | None = None, cpu: int | None = None) -> None:
    """Become node `nid` and serve until SIGTERM/SIGINT (or until process `tied_to` exits);
    `ready()` is called once it answers. `cpu`: pin the node to this CPU (else the cluster
    file's ``cpu`` for it, else unpinned)."""
    make_run_dir(cluster.run_dir)
    if spin_s is None and "spin_s" in cluster.extra:
        spin_s = float(cluster.extra["spin_s"])
    if cpu is None:
        cpu = cluster.node(nid).cpu
    if cpu is not None:
        _pin(cpu, f"node {nid}")
    placement = cluster.extra.get("placement", "none") if cpu is not None else "none"
    scripts_on = script_cpu(placement, cpu, [n.cpu for n in cluster.nodes if n.cpu is not None])
    node, transport = build_node(cluster, nid, seed=int(cluster.extra.get("seed", 0)))
    # What the node has built stays as long as it runs: the cyclic collector need not walk
    # it again on every full collection (as Cluster.run does for a modeled cluster).
    gc.freeze()
    pid_path = cluster.pid_path(nid)
    # A node gives its core way to the scripts on it only when they are its own (NodeServer).
    give_way = scripts_on is None or scripts_on == cpu
    server = NodeServer(node, cluster.socket_path(nid), log=_log, give_way=give_way,
                        describe=lambda: {"cluster": cluster.name, "transport": cluster.transport,
                                          "nic": _nic(cluster), "nids": cluster.nids(),
                                          "params": list(cluster.params), "cpu": cpu, "placement": placement,
                                          "script_cpu": scripts_on},
                        **({} if spin_s is None else {"spin_s": spin_s}))
    try:
        if tied_to is not None:
            server.tie_to(tied_to)
        server.bind()
        _write_pid(pid_path)
        _log(f"node {nid} of cluster {cluster.name!r} serving on {cluster.socket_path(nid)} "
             f"({cluster.transport}, {cluster.nic})")
        if ready is not None:
            ready()
        server.serve()
    finally:
        transport.close()
        _remove(pid_path)
        _log(f"node {nid} stopped")


def run_as_node(cluster: ClusterFile, nid: int, size: int, program, args=(), *, name: str = "rank"):
    """Become node `nid` of `cluster` and run ``program(dp, nid, size, *args)`` under trio on
    it, in this process: (its result, the node's statistics).

    The kernel is the one a node process runs (`build_node`: the transport, the NIC model,
    its driver, DP, the cluster's modules); the program is its only process, and the node
    is polled by the program's own waits (the polling watchdog). Pinned as `serve_node`
    pins (the cluster file's ``cpu``). EBUSY while a node process serves `nid`: the
    transport is that node's.
    """
    import trio
    from kernelsim import RunnableCounter
    from libdp._api import DP
    if _read_pid(cluster.pid_path(nid)) is not None:
        raise OSError(errno.EBUSY, f"node {nid} of cluster {cluster.name!r} is running: a program that runs its "
                                   "node's kernel itself needs the node's transport to itself")
    cpu = cluster.node(nid).cpu
    if cpu is not None:
        _pin(cpu, f"node {nid}")
    node, transport = build_node(cluster, nid, seed=int(cluster.extra.get("seed", 0)))
    try:
        gc.freeze()                     # as serve_node: what the node built lives as long as it runs
        spin_s = float(cluster.extra.get("spin_s", DEFAULT_SPIN_S))
        dp = DP(node.spawn(f"{name}[{nid}]"), spin_s=spin_s)
        # The counter lets a call that finished at once skip a schedule point that would
        # find nothing to do (`kernelsim.checkpoint`).
        result = trio.run(program, dp, nid, size, *args, instruments=[RunnableCounter()])
        return result, node.stats()
    finally:
        transport.close()


def _nic(cluster: ClusterFile) -> str:
    return resolve_platform(cluster.platform, cluster.nic)[1]


def _log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} dp node: {msg}", file=sys.stderr, flush=True)


def _proc_start(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), or None if it is not running (a zombie is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        try:
            os.waitpid(pid, os.WNOHANG)         # ours (started here): reap it
        except ChildProcessError:
            pass
        return None
    return fields[19]


def _write_pid(path: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {_proc_start(os.getpid())}\n")
    os.replace(path + ".tmp", path)


def _read_pid(path: str) -> int | None:
    """The pid in a pid file if that very process still runs (same start time), else None."""
    try:
        with open(path) as f:
            pid_s, start = f.read().split()
        pid = int(pid_s)
    except (OSError, ValueError):
        return None
    return pid if _proc_start(pid) == start else None


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def start_node(cluster: ClusterFile, nid: int, *, timeout: float = READY_TIMEOUT_S, tied: bool = False,
               cpu: int | None = None) -> int:
    """Start node `nid` as a detached process; its pid once it answers. The error it died of, else.

    `tied`: the node stops when this process exits (temporary clusters: nothing outlives a crash)."""
    cluster.node(nid)
    if cluster.path is None:
        raise OSError(errno.EINVAL, "a detached node needs its cluster file saved (cluster.path)")
    make_run_dir(cluster.run_dir)
    if _read_pid(cluster.pid_path(nid)) is not None:
        raise OSError(errno.EEXIST, f"node {nid} of cluster {cluster.name!r} is already running")
    log_path = cluster.log_path(nid)
    r, w = os.pipe()
    with open(log_path, "ab") as log:
        os.chmod(log_path, 0o600)
        proc = subprocess.Popen([sys.executable, "-m", "libdp._cli", "node", "start", "--id", str(nid),
                                 "--cluster", cluster.path, "--ready-fd", str(w),
                                 *(["--tied-to", str(os.getpid())] if tied else []),
                                 *(["--cpu", str(cpu)] if cpu is not None else [])],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(w,),
                                start_new_session=True, close_fds=True)
    os.close(w)
    try:
        ready, _, _ = select_ready(r, timeout)
        got = os.read(r, 64) if ready else b""
    finally:
        os.close(r)
    if got.startswith(b"ok"):
        return proc.pid
    if ready:                                   # the pipe closed: the node is exiting
        try:
            proc.wait(5.0)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        proc.kill()
        proc.wait()
        why = f"did not answer within {timeout} s"
    else:
        why = _last_error(log_path) or f"exited with status {proc.returncode}"
    raise OSError(errno.EIO, f"node {nid} did not start: {why}")


def select_ready(fd, timeout):
    import select
    return select.select([fd], [], [], timeout)


def _last_error(log_path: str) -> str:
    try:
        with open(log_path) as f:
            lines = [ln.strip() for ln in f if ln.strip()]
    except OSError:
        return ""
    for ln in reversed(lines):
        if ln.startswith("dp: "):
            return ln[4:]
    return lines[-1] if lines else ""


def stop_node(cluster: ClusterFile, nid: int, *, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop node `nid` (SIGTERM, SIGKILL after `timeout`); False if it was not running."""
    pid = _read_pid(cluster.pid_path(nid))
    if pid is None:
        _remove(cluster.pid_path(nid))
        _remove(cluster.socket_path(nid))
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    if not _wait_gone(pid, timeout):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _wait_gone(pid, 5.0)
    for p in (cluster.pid_path(nid), cluster.socket_path(nid), cluster.log_path(nid)):
        _remove(p)
    return True


def _wait_gone(pid: int, timeout: float) -> bool:
    try:
        pfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        import select
        gone = bool(select.select([pfd], [], [], timeout)[0])
    finally:
        os.close(pfd)
    if gone:
        try:
            os.waitpid(pid, os.WNOHANG)     # reap it if it is our child (a node this process started)
        except ChildProcessError:
            pass
    return gone


def node_status(cluster: ClusterFile, nid: int) -> dict:
    """What node `nid` says of itself (modules, processes and their files), or that it is down."""
    from libdp._attach import NodeLink
    pid = _read_pid(cluster.pid_path(nid))
    try:
        link = NodeLink.connect(cluster.socket_path(nid), name="dp-status")
    except OSError as exc:
        return {"nid": nid, "state": "down" if pid is None else "not answering", "pid": pid, "error": exc.strerror}
    try:
        return {"state": "up", **link.admin("status")}
    finally:
        link.close()


# --------------------------------------------------------------------------- a cluster in a box


def cluster_up(nodes: int, *, name: str = "default", transport: str = "shm", nic: str | None = None,
               platform: str | None = None, params=(), load=(), run_dir: str | None = None, seed: int = 0,
               base_port: int | None = None, tied: bool = False, spin_s: float | None = None,
               placement: str = "auto", start: bool = True) -> ClusterFile:
    """N nodes on this host, each a process; the cluster file is ``<run_dir>/cluster.toml``.

    Everything made is removed again if a step fails. EEXIST if the cluster is up already.
    `tied`: the nodes stop when this process exits (``cluster_down`` still removes the rest).
    `spin_s`: how long an idle node polls before it sleeps (default: the node server's; with
    ``cross`` or ``pair`` placement and a CPU per node, `PINNED_NODE_SPIN_S`). `placement`: `plan_placement`.
    `start`: False makes the cluster's file, wires and rings but starts no node process
    (each node is then a program's own: `run_as_node`).
    """
    from libdp._clusterfile import TRANSPORTS, default_run_dir
    from libdp._realrun import link_shape
    if not isinstance(nodes, int) or isinstance(nodes, bool) or not 1 <= nodes <= 256:
        raise OSError(errno.EINVAL, f"a cluster in a box has 1..256 nodes, not {nodes!r}")
    if transport not in TRANSPORTS:
        raise OSError(errno.EINVAL, f"transport is one of {', '.join(TRANSPORTS)}, not {transport!r}")
    platform, nic = resolve_platform(platform, nic)
    pkg = nic_package(nic)
    prof = build_profile(platform, params)          # EINVAL for a bad --param, before anything is made
    params = [p if isinstance(p, str) else f"{p[0]}={p[1]}" for p in params]
    run_dir = run_dir or default_run_dir(name)
    if os.path.exists(os.path.join(run_dir, "cluster.toml")):
        raise OSError(errno.EEXIST, f"cluster {name!r} is already up ({run_dir}); dp cluster down first")
    placement, cpus = plan_placement(nodes, placement)
    specs = [NodeSpec(nid, cpu=cpus.get(nid)) for nid in range(nodes)]
    if nodes > 2:
        frame_router(pkg, {s.nid: {pkg.LINK_KIND: pkg.hwaddr_for(s.nid)} for s in specs}, 0)   # EINVAL if unroutable
    if transport == "packet" and pkg.LINK_KIND != "ether":
        raise OSError(errno.EINVAL, "the packet transport carries Ethernet frames: use --nic dec21140")
    shape = link_shape(prof)
    if shape is not None and shape.rate_bps is not None and transport != "packet":
        raise OSError(errno.EINVAL, f"link.rate_bps cannot be applied to the {transport} transport "
                                    "(only the packet transport's veths can be shaped)")
    extra = {"seed": seed, "made_by": "dp cluster up", "faults_by": "injector", "placement": placement}
    if spin_s is not None:
        if not isinstance(spin_s, (int, float)) or isinstance(spin_s, bool) or not 0 <= spin_s <= 1:
            raise OSError(errno.EINVAL, f"a node's spin is 0..1 s, not {spin_s!r}")
        extra["spin_s"] = float(spin_s)
    elif placement in PINNED and len(set(cpus.values())) == nodes:
        # A node with a core of its own polls (yielding): the peer node's frames and its
        # scripts' gate entries find it awake.
        extra["spin_s"] = PINNED_NODE_SPIN_S
    if transport == "udp":
        base = base_port if base_port is not None else free_udp_base(nodes)
        for s in specs:
            s.addr = f"127.0.0.1:{base + s.nid}"
    make_run_dir(run_dir)
    netns = None
    cluster = None
    try:
        if transport == "packet":
            from dpcore import DM_HEADER_BYTES
            from kernelsim.media.netns import LinkShape, NetnsCluster
            mtu = max(1500, prof["dp.max_message"] + DM_HEADER_BYTES)
            netns = NetnsCluster.create(max(nodes, 2), prefix=f"dp-{name}"[:12],
                                        macs={r: pkg.hwaddr_for(r) for r in range(max(nodes, 2))}, mtu=mtu)
            extra["namespaces"] = netns.namespaces
            for s in specs:
                s.netns, s.iface = netns.iface(s.nid)
                s.mac = pkg.hwaddr_for(s.nid).hex(":")
            if shape is not None:
                try:
                    kind = netns.shape(shape)
                    if shape.faulty:
                        extra["faults_by"] = kind
                except OSError as exc:
                    if exc.errno != errno.ENOTSUP:
                        raise
                    if shape.rate_bps is not None:       # no netem: the rate by tbf, faults by the adapters
                        netns.shape(LinkShape(rate_bps=shape.rate_bps))
        cluster = ClusterFile(name, nic, transport, specs, platform=platform, params=params, load=load,
                              run_dir=run_dir, extra=extra)
        cluster.save(os.path.join(run_dir, "cluster.toml"))
        if start:
            _start_all(cluster, tied)
    except BaseException:
        if cluster is not None and cluster.path is not None:
            cluster_down(cluster)
        else:
            if netns is not None:
                netns.destroy()
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return cluster


def _start_all(cluster: ClusterFile, tied: bool = False) -> None:
    """Start every node; they come up in parallel (each start waits only for its own node)."""
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, len(cluster.nodes))) as ex:
        futures = [ex.submit(start_node, cluster, n.nid, tied=tied) for n in cluster.nodes]
        errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:
        raise errors[0]


def cluster_down(cluster: ClusterFile | str) -> dict:
    """Remove everything `cluster` made: node processes, namespaces, rings, the run directory."""
    if isinstance(cluster, str):
        cluster = ClusterFile.load(cluster)
    stopped = [n.nid for n in cluster.nodes if stop_node(cluster, n.nid)]
    removed_ns = []
    names = cluster.extra.get("namespaces") or [n.netns for n in cluster.nodes if n.netns]
    if names:
        from pyroute2 import netns as pyr_netns
        present = set(pyr_netns.listnetns())
        for ns in names:
            if ns in present:
                pyr_netns.remove(ns)
                removed_ns.append(ns)
    rings = remove_cluster_rings(cluster.name)
    if cluster.extra.get("made_by") == "dp cluster up":
        shutil.rmtree(cluster.run_dir, ignore_errors=True)
    return {"stopped": stopped, "namespaces_removed": removed_ns, "rings_removed": rings}


def cluster_status(cluster: ClusterFile) -> list[dict]:
    return [node_status(cluster, n.nid) for n in cluster.nodes]


def find_cluster(path: str | None = None, name: str = "default") -> ClusterFile:
    """The cluster file given, else $DP_CLUSTER, else $DP_RUN_DIR/cluster.toml, else the named cluster's."""
    from libdp._clusterfile import default_run_dir
    path = path or os.environ.get("DP_CLUSTER")
    if path is None:
        run_dir = os.environ.get("DP_RUN_DIR") or default_run_dir(name)
        path = os.path.join(run_dir, "cluster.toml")
        if not os.path.exists(path):
            raise OSError(errno.ENOENT, f"no cluster is up at {run_dir} (dp cluster up, or --cluster FILE)")
    return ClusterFile.load(path)


def free_udp_base(n: int) -> int:
    """A base port with n free UDP ports above it on loopback (for clusters in a box)."""
    for _ in range(50):
        base = random.randrange(20000, 60000 - n)
        socks = []
        try:
            for i in range(n):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(s)
                s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise OSError(errno.EADDRINUSE, "no free UDP ports on loopback")
