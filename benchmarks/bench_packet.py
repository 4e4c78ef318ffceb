"""1-byte round trip over raw Ethernet (AF_PACKET on a veth pair) against shared memory.

    python benchmarks/bench_packet.py [--iters 3000] [--runs 3] [--no-raw]

Needs root (network namespaces, raw sockets). Rows, all in this one run:

  DP, shm            `run_real_spmd(pingpong, [1], iters)`: two node processes, the whole
                     DP stack (21140 model, driver, DP), frames on a ShmLink
  DP, packet/veth    the same, transport="packet": each node in its own network
                     namespace, frames as raw Ethernet on a veth pair
  raw shm            no DP: a forked echo child and the parent busy-polling a ShmLink
  raw packet/veth    no DP: the same over two PacketPorts (60-byte Ethernet frames)

The DP rows are the median (min..max) of --runs runs, shm and packet alternating; the
raw rows are the median (p99) of single round trips. Wall-clock figures of this
implementation on this host: compare rows, not hosts.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kernelsim.media.netns import NetnsCluster  # noqa: E402
from kernelsim.media.packet import PacketPort  # noqa: E402
from kernelsim.media.real import ShmLink  # noqa: E402
from libdp import pingpong  # noqa: E402
from libdp._realrun import run_real_spmd  # noqa: E402
from nic_drivers.dec21140 import hwaddr_for  # noqa: E402

RAW_SECONDS = 2.0          # cap per raw row


def _dp_rtt(transport: str, iters: int) -> float:
    results, _ = run_real_spmd(pingpong, [1], iters, transport=transport, timeout=120.0)
    return results[0][0]["rtt_us"]


# ------------------------------------------------------------------ raw rows (no DP)

def echo(port, stop: bytes) -> None:
    """Answer every frame on ``port`` (MACs swapped) until ``stop`` comes: the bare far side."""
    buf = bytearray(port.max_frame)
    pending, recv_into, send = port.pending, port.recv_into, port.send
    while True:
        while not pending():
            pass
        n = recv_into(buf)
        if n < 0:
            continue
        frame = bytes(buf[:n])
        if frame == stop:
            return
        if len(frame) >= 14:       # Ethernet: answer to the sender
            frame = frame[6:12] + frame[0:6] + frame[12:]
        while not send(frame):
            pass


def _child_shm(names):
    end = ShmLink.attach(names, 1)
    try:
        echo(end, b"")
    finally:
        end.close()


def _child_packet(ns, ifname, stop):
    from pyroute2.netns import setns
    setns(ns, flags=0)
    with PacketPort.open(ifname) as port:
        echo(port, stop)


def round_trips_ns(port, ping: bytes, n: int) -> list[int]:
    """Nanoseconds of each of ``n`` busy-polled round trips of ``ping`` (at most RAW_SECONDS)."""
    buf = bytearray(port.max_frame)
    pending, recv_into, send = port.pending, port.recv_into, port.send
    perf = time.perf_counter_ns
    out = []
    cap = perf() + int(RAW_SECONDS * 1e9)
    for _ in range(n):
        t0 = perf()
        while not send(ping):
            pass
        while True:
            while not pending():
                pass
            if recv_into(buf) >= 0:
                break
        t1 = perf()
        out.append(t1 - t0)
        if t1 > cap:
            break
    return out


def _raw_shm(ctx, n):
    link = ShmLink.create(slots=256, slot_bytes=2048)
    try:
        proc = ctx.Process(target=_child_shm, args=(link.names,), daemon=True)
        proc.start()
        end = link.end(0)
        try:
            return round_trips_ns(end, b"\x5a", n)
        finally:
            end.send(b"")
            proc.join(5)
    finally:
        link.close()
        link.unlink()


def _raw_packet(ctx, n):
    macs = {0: hwaddr_for(0), 1: hwaddr_for(1)}
    with NetnsCluster.create(2, macs=macs) as nc:
        ns0, if0 = nc.iface(0)
        ns1, if1 = nc.iface(1)
        stop = macs[1] + macs[0] + b"\x88\xb5" + b"STOP".ljust(46, b"\0")
        ping = macs[1] + macs[0] + b"\x88\xb5" + b"\x5a".ljust(46, b"\0")
        with PacketPort.open(if0, netns=ns0) as port:
            proc = ctx.Process(target=_child_packet, args=(ns1, if1, stop), daemon=True)
            proc.start()
            try:
                # The echo is ready once a ping comes back.
                deadline = time.monotonic() + 10
                buf = bytearray(port.max_frame)
                while time.monotonic() < deadline:
                    port.send(ping)
                    time.sleep(0.01)
                    if port.recv_into(buf) >= 0:
                        break
                while port.recv_into(buf) >= 0:
                    pass
                return round_trips_ns(port, ping, n)
            finally:
                port.send(stop)
                proc.join(5)
                if proc.is_alive():
                    proc.kill()


def _summary(samples):
    s = sorted(samples[len(samples) // 10:])            # first 10% are warm-up
    return statistics.median(s) / 1000, s[min(len(s) - 1, int(len(s) * 0.99))] / 1000, len(s)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=3000, help="DP round trips per run (default: 3000)")
    ap.add_argument("--runs", type=int, default=3, help="runs per DP row (default: 3)")
    ap.add_argument("--no-raw", action="store_true", help="only the DP rows")
    args = ap.parse_args(argv)
    ok, why = NetnsCluster.available()
    if not ok:
        print(f"bench_packet: {why}", file=sys.stderr)
        return 1
    started = time.perf_counter()
    dp = {"shm": [], "packet": []}
    for _ in range(args.runs):
        for transport in ("shm", "packet"):
            dp[transport].append(_dp_rtt(transport, args.iters))
    raw = {}
    if not args.no_raw:
        ctx = multiprocessing.get_context("fork")
        raw["shm"] = _summary(_raw_shm(ctx, 100_000))
        raw["packet"] = _summary(_raw_packet(ctx, 100_000))
    elapsed = time.perf_counter() - started

    print(f"# 1-byte round trip, two processes (python {sys.version.split()[0]}, {os.cpu_count()} CPUs), "
          f"wall clock")
    print(f"# {'row':<34}{'RTT (us)':>10}  {'spread':<26}")
    base = statistics.median(dp["shm"])
    for transport, label in (("shm", "DP, shm ring"), ("packet", "DP, AF_PACKET on veth")):
        runs = dp[transport]
        med = statistics.median(runs)
        print(f"  {label:<34}{med:>10.1f}  min {min(runs):.1f} .. max {max(runs):.1f} "
              f"({args.runs} x {args.iters}; x{med / base:.2f} of shm)")
    for transport, label in (("shm", "raw shm ring, busy poll"), ("packet", "raw AF_PACKET on veth, busy poll")):
        if transport in raw:
            med, p99, count = raw[transport]
            print(f"  {label:<34}{med:>10.2f}  p99 {p99:.2f} ({count} round trips)")
    if raw:
        dp_extra = statistics.median(dp["packet"]) - statistics.median(dp["shm"])
        raw_extra = raw["packet"][0] - raw["shm"][0]
        print(f"# packet - shm: DP {dp_extra:+.1f} us, raw transport {raw_extra:+.2f} us")
    print(f"# total {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
