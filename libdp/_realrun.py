"""Real time: one OS process per node, frames on a real transport.

The parent creates the transport -- a full-duplex shared-memory link, a pair of UDP
sockets on loopback (what joins hosts), or network namespaces joined by a veth pair for
raw Ethernet frames (AF_PACKET) -- forks one process per rank and collects each
rank's result through a pipe. Each
child builds its node exactly as a modeled one -- same kernel, modules, driver and
device model -- except that its engine runs in real time and its NIC's medium is the
transport (`kernelsim.media.backend.DevicePort`).

Dead peers: the parent waits on every rank's pipe *and* its process at once, so a rank
that dies (killed, crashed) ends the run at once with an error naming it, and the other
ranks are killed rather than left retrying; a rank also dies with its parent.

Faults (``fault.*``): on the packet transport a netem qdisc on the veths (the kernel's
own loss, corruption, duplication and reordering); on shared memory and UDP -- or where
the kernel has no netem -- the receiving adapter's seeded injector. A link rate
(``link.rate_bps`` given with --param) shapes the veths; over shm and UDP it cannot be
applied and is refused.
"""
from __future__ import annotations

import ctypes
import errno
import multiprocessing
import multiprocessing.connection
import random
import signal
import time
import traceback

import trio

from dpcore import DM_HEADER_BYTES
from kernelsim.media.backend import DevicePort
from kernelsim.media.faults import FaultInjector
from kernelsim.media.netns import LinkShape, NetnsCluster
from kernelsim.media.packet import PacketPort
from kernelsim.media.real import ShmLink, UdpPort
from libdp._api import DP
from libdp._cluster import Cluster, build_profile, resolve_platform
from nic_drivers import nic as nic_package

__all__ = ["run_real_spmd"]

REAL_SLOT_BYTES = 8192


def _transport_end(kind, where, rank):
    if kind == "shm":
        return ShmLink.attach(where, rank)
    if kind == "packet":
        from pyroute2.netns import setns
        ns, ifname = where[rank]
        setns(ns, flags=0)              # this process becomes the node's host, then opens its NIC
        return PacketPort.open(ifname)
    return where[rank]


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Linux: this process gets SIGKILL when the one that forked it exits (no orphans)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):   # pragma: no cover - not Linux
        pass


def _child(rank, size, transport, hosts, program, args, config, inject, seed, conn):
    try:
        die_with_parent()
        kind, where = transport
        port = DevicePort(_transport_end(kind, where, rank))
        node = Cluster.real_node(rank, hosts, port, **config)
        if inject:
            port.inject(FaultInjector(node.profile, random.Random(seed * 1_000_003 + rank)))
        dp = DP(node.spawn(getattr(program, "__name__", "spmd")))
        result = trio.run(program, dp, rank, size, *args)
        conn.send(("ok", result, node.stats()))
    except BaseException as exc:   # report everything, the parent decides
        conn.send(("error", _describe(exc), None))
    finally:
        conn.close()


def _describe(exc: BaseException) -> tuple:
    """What crosses the pipe of a failed rank: enough to raise the same kind of error."""
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _describe(exc.exceptions[0])
    kind = "os" if isinstance(exc, OSError) else "value" if isinstance(exc, ValueError) else "other"
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return kind, getattr(exc, "errno", None), f"{type(exc).__name__}: {text}" if kind == "other" else text, \
        traceback.format_exc()


def _raise_failure(rank: int, info: tuple):
    kind, err, text, tb = info
    if kind == "os":
        exc = OSError(err or errno.EIO, f"rank {rank}: {text}")
    elif kind == "value":
        exc = ValueError(f"rank {rank}: {text}")
    else:
        exc = RuntimeError(f"rank {rank} failed: {text}")
    exc.add_note(f"rank {rank}'s traceback:\n{tb}")
    raise exc


def _died(rank: int, proc) -> OSError:
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            how = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"killed by signal {-code}"
    else:
        how = f"exited with status {code}"
    return OSError(errno.ECONNRESET, f"rank {rank} (node {rank}) died during the run ({how})")


def _collect(procs, pipes, timeout: float):
    """Every rank's (result, stats), failing at once if a rank fails or dies."""
    nodes = len(procs)
    results, stats = [None] * nodes, {}
    waiting = {rank: (procs[rank], pipes[rank]) for rank in range(nodes)}
    deadline = time.monotonic() + timeout
    while waiting:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"ranks {sorted(waiting)} did not finish within {timeout} s")
        objs = [o for p, c in waiting.values() for o in (c, p.sentinel)]
        ready = multiprocessing.connection.wait(objs, remaining)
        for rank, (p, conn) in list(waiting.items()):
            if conn not in ready and p.sentinel not in ready:
                continue
            try:
                if not conn.poll():
                    raise EOFError          # the process is gone and said nothing
                status, value, st = conn.recv()
            except (EOFError, OSError):
                p.join(1.0)
                raise _died(rank, p) from None
            del waiting[rank]
            if status != "ok":
                _raise_failure(rank, value)
            results[rank] = value
            stats[f"node{rank}"] = st
    return results, stats


TRANSPORTS = ("shm", "udp", "packet")


def link_shape(profile) -> LinkShape | None:
    """The faults (and a link rate given with --param) asked of a real link, or None."""
    rate = profile.overrides.get("link.rate_bps")
    shape = LinkShape(loss=profile.get("fault.loss", 0.0), corrupt=profile.get("fault.corrupt", 0.0),
                      duplicate=profile.get("fault.duplicate", 0.0), reorder=profile.get("fault.reorder", 0.0),
                      reorder_delay_s=profile.get("fault.reorder_delay_s", 0.0),
                      rate_bps=None if rate is None else float(rate))
    return shape if shape.faulty or shape.rate_bps is not None else None


def run_real_spmd(program, *args, nodes: int = 2, platform: str | None = None, nic: str | None = None,
                  params=(), load=(), timeout: float = 300.0, transport: str = "shm", seed: int = 0):
    """Run ``program(dp, rank, size, *args)`` in `nodes` processes; return (results, stats)."""
    if nodes != 2:
        raise OSError(errno.EINVAL, "real mode joins 2 nodes by a point-to-point link (more need a switch)")
    if transport not in TRANSPORTS:
        raise OSError(errno.EINVAL, f"real transport is one of {', '.join(TRANSPORTS)}, not {transport!r}")
    platform, nic = resolve_platform(platform, nic)
    prof = build_profile(platform, params)             # validate before forking
    pkg = nic_package(nic)
    if transport == "packet" and pkg.LINK_KIND != "ether":
        raise OSError(errno.EINVAL, "packet transport carries Ethernet frames: use --nic dec21140")
    shape = link_shape(prof)
    if shape is not None and shape.rate_bps is not None and transport != "packet":
        raise OSError(errno.EINVAL, f"link.rate_bps cannot be applied to the {transport} transport in real time "
                                    "(only the packet transport's veths can be shaped)")
    inject = shape is not None and shape.faulty and transport != "packet"
    hosts = {r: {pkg.LINK_KIND: pkg.hwaddr_for(r)} for r in range(nodes)}
    config = {"platform": platform, "nic": nic, "params": params, "load": load}
    ctx = multiprocessing.get_context("fork")
    procs, pipes = [], []
    finished = False
    link, ports, netns = None, (), None
    if transport == "shm":
        # A slot holds any NIC's largest DP frame (4095 bytes of data plus link headers).
        link = ShmLink.create(slots=256, slot_bytes=REAL_SLOT_BYTES)
        where = link.names
    elif transport == "packet":
        # DP's largest frame can exceed 802.3's 1500-byte payload (p133: 8-byte DM header + 1500
        # bytes, as the 21140's 1536-byte buffers allowed): the veths' MTU must carry it.
        mtu = max(1500, prof["dp.max_message"] + DM_HEADER_BYTES)
        netns = NetnsCluster.create(nodes, macs={r: pkg.hwaddr_for(r) for r in range(nodes)}, mtu=mtu)
        where = {r: netns.iface(r) for r in range(nodes)}
        if shape is not None:
            try:
                netns.shape(shape)
            except OSError as exc:
                if exc.errno != errno.ENOTSUP:
                    raise
                inject = True           # no netem here: the adapters inject the same faults
                if shape.rate_bps is not None:
                    netns.shape(LinkShape(rate_bps=shape.rate_bps))
    else:
        ports = (UdpPort.bind("127.0.0.1"), UdpPort.bind("127.0.0.1"))
        ports[0].connect(ports[1].address)
        ports[1].connect(ports[0].address)
        where = ports                       # inherited across fork, one per rank
    try:
        for rank in range(nodes):
            parent_end, child_end = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_child, args=(rank, nodes, (transport, where), hosts, program, args, config,
                                                 inject, seed, child_end), daemon=True)
            p.start()
            child_end.close()
            procs.append(p)
            pipes.append(parent_end)
        results, stats = _collect(procs, pipes, timeout)
        finished = True
        if netns is not None and shape is not None and not inject:
            for rank in range(nodes):
                stats[f"node{rank}"]["link_faults"] = {"applied_by": "netem", **shape.as_dict()}
        return results, stats
    finally:
        for p in procs:                 # after a failure the others are not waited for
            p.join(timeout=2 if finished else 0)
            if p.is_alive():
                p.kill()
                p.join(timeout=2)
        if link is not None:
            link.unlink()        # before close: close forgets the doorbell FIFOs' paths
            link.close()
        for p in ports:
            p.close()
        if netns is not None:
            netns.destroy()
