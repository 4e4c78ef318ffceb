"""Real time: one OS process per node, frames on a real transport.

The parent creates the transport -- a full-duplex shared-memory link, or a pair of UDP
sockets on loopback (what joins hosts) -- forks one process per rank and collects each
rank's result through a pipe. Each
child builds its node exactly as a modeled one -- same kernel, modules, driver and
device model -- except that its engine runs in real time and its NIC's medium is the
transport (`kernelsim.media.backend.DevicePort`).
"""
from __future__ import annotations

import errno
import multiprocessing
import traceback

import trio

from kernelsim.media.backend import DevicePort
from kernelsim.media.real import ShmLink, UdpPort
from libdp._api import DP
from libdp._cluster import Cluster, build_profile, resolve_platform
from nic_drivers import nic as nic_package

__all__ = ["run_real_spmd"]

REAL_SLOT_BYTES = 8192


def _child(rank, size, transport, hosts, program, args, config, conn):
    try:
        kind, where = transport
        port = DevicePort(ShmLink.attach(where, rank) if kind == "shm" else where[rank])
        node = Cluster.real_node(rank, hosts, port, **config)
        dp = DP(node.spawn(getattr(program, "__name__", "spmd")))
        result = trio.run(program, dp, rank, size, *args)
        conn.send(("ok", result, node.stats()))
    except BaseException as exc:   # report everything, the parent decides
        conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}", None))
    finally:
        conn.close()


TRANSPORTS = ("shm", "udp")


def run_real_spmd(program, *args, nodes: int = 2, platform: str | None = None, nic: str | None = None,
                  params=(), load=(), timeout: float = 300.0, transport: str = "shm"):
    """Run ``program(dp, rank, size, *args)`` in `nodes` processes; return (results, stats)."""
    if nodes != 2:
        raise OSError(errno.EINVAL, "real mode joins 2 nodes by a point-to-point link (more need a switch)")
    if transport not in TRANSPORTS:
        raise OSError(errno.EINVAL, f"real transport is one of {', '.join(TRANSPORTS)}, not {transport!r}")
    platform, nic = resolve_platform(platform, nic)
    build_profile(platform, params)                    # validate before forking
    pkg = nic_package(nic)
    hosts = {r: {pkg.LINK_KIND: pkg.hwaddr_for(r)} for r in range(nodes)}
    config = {"platform": platform, "nic": nic, "params": params, "load": load}
    ctx = multiprocessing.get_context("fork")
    procs, pipes = [], []
    link, ports = None, ()
    if transport == "shm":
        # A slot holds any NIC's largest DP frame (4095 bytes of data plus link headers).
        link = ShmLink.create(slots=256, slot_bytes=REAL_SLOT_BYTES)
        where = link.names
    else:
        ports = (UdpPort.bind("127.0.0.1"), UdpPort.bind("127.0.0.1"))
        ports[0].connect(ports[1].address)
        ports[1].connect(ports[0].address)
        where = ports                       # inherited across fork, one per rank
    try:
        for rank in range(nodes):
            parent_end, child_end = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_child, args=(rank, nodes, (transport, where), hosts, program, args, config,
                                                 child_end), daemon=True)
            p.start()
            child_end.close()
            procs.append(p)
            pipes.append(parent_end)
        results, stats = [None] * nodes, {}
        for rank, (p, conn) in enumerate(zip(procs, pipes)):
            if not conn.poll(timeout):
                raise TimeoutError(f"rank {rank} did not finish within {timeout} s")
            status, value, st = conn.recv()
            if status != "ok":
                raise RuntimeError(f"rank {rank} failed: {value}")
            results[rank] = value
            stats[f"node{rank}"] = st
        return results, stats
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
        if link is not None:
            link.unlink()        # before close: close forgets the doorbell FIFOs' paths
            link.close()
        for p in ports:
            p.close()
