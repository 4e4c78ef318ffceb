"""Real time: one OS process per node, frames on a real transport.

The parent creates the transport -- a full-duplex shared-memory link, a pair of UDP
sockets on loopback (what joins hosts), or network namespaces joined by a veth pair for
raw Ethernet frames (AF_PACKET) -- forks one process per rank and collects each
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

from dpcore import DM_HEADER_BYTES
from kernelsim.media.backend import DevicePort
from kernelsim.media.netns import NetnsCluster
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


def _child(rank, size, transport, hosts, program, args, config, conn):
    try:
        kind, where = transport
        port = DevicePort(_transport_end(kind, where, rank))
        node = Cluster.real_node(rank, hosts, port, **config)
        dp = DP(node.spawn(getattr(program, "__name__", "spmd")))
        result = trio.run(program, dp, rank, size, *args)
        conn.send(("ok", result, node.stats()))
    except BaseException as exc:   # report everything, the parent decides
        conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}", None))
    finally:
        conn.close()


TRANSPORTS = ("shm", "udp", "packet")


def run_real_spmd(program, *args, nodes: int = 2, platform: str | None = None, nic: str | None = None,
                  params=(), load=(), timeout: float = 300.0, transport: str = "shm"):
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
    hosts = {r: {pkg.LINK_KIND: pkg.hwaddr_for(r)} for r in range(nodes)}
    config = {"platform": platform, "nic": nic, "params": params, "load": load}
    ctx = multiprocessing.get_context("fork")
    procs, pipes = [], []
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
        if netns is not None:
            netns.destroy()
