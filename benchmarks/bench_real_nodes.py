"""Real nodes (issue 10): scripts attached to node processes, against bare Python baselines
measured in the same run.

    python benchmarks/bench_real_nodes.py [--only rtt,floor,handoff,gate,stream,packet,alltoall]
                                          [--iters 2000] [--runs 3] [--count 20000] [--stream-count 100000]
                                          [--window 64] [--nodes 8]

Rows (wall time; every DP row runs the real stack: attached script -> call gate -> node
process (kernel, NIC driver, 21140 model, DP) -> transport -> node process -> Token Buffer
Pool and delivery ring -> attached script):

  rtt      1-byte round trip script to script through two node processes over shared
           memory (`dp cluster up --nodes 2`), against a trio socketpair ping-pong
           between two processes (each side ``await recv`` / ``await send``); as ``dp
           cluster up`` places the processes here (on a host with fewer CPUs than
           processes: placement cross, nodes and scripts polling before they sleep), with
           the scripts' trio calls, with scripts that sleep at once (``DP_SPIN_US=0``, the
           default until session 32), then with placement pair (scripts sleep on their
           node's core), with placement none (every process sleeps on its doorbell), and
           none with scripts that poll up to --spin-us before they sleep (``DP_SPIN_US``).
  gate     one attached script: ``dp_write`` (the call gate: a shared-memory submission
           ring the node polls) against ``write()`` (the generic entry: a request over
           the node's control socket through its system-call table), wall µs per call,
           best of --runs turns; the gate's turn ends when the node has taken every entry.
  stream   one way, full-size messages (the largest DP message): `libdp.bandwidth`, the
           OSU-style stream of ``dp bandwidth`` (windows of --window messages, one
           acknowledgement per window; DP has no flow control of its own), delivered MB/s
           (10^6 bytes of payload per second), against a bare Python shared-memory frame
           ring (ShmLink) streaming frames of the same size between two processes. As
           the cluster places its processes and `dp bandwidth --real` runs it (real time:
           a window's ack may take libdp._bench.ACK_TIMEOUT_MIN_REAL_S), then with
           placements pair and none, and with --ack-floor-ms once more with that floor.
           (With the modeled floor of 0.5 ms the gate posts a window far faster than the
           four processes deliver it, marks land in a full pool and most of the stream
           is dropped: try --ack-floor-ms 0.5.)
  floor    the round trip's structure without DP: four processes (two "scripts", two
           "nodes") pass a 1-byte frame along the same six shared-memory ring hops
           (script -> node -> node -> script and back) with nothing else to do, once
           sleeping on the doorbells, once polling --spin-us first (sched_yield between
           polls), once polling with --floor-work-us of busy work per node pass -- what the
           hops alone cost on this host, and what a node's own CPU adds on top; then
           the same placed as placements cross and pair place a 2-node cluster (each "node"
           pinned to a CPU of its own, each "script" on the other node's CPU or on its own
           node's, the nodes polling, the scripts polling beside the other node under
           cross and sleeping beside their own under pair, as attached scripts do).
  handoff  one hand-off between two processes, no DP: a pipe ping-pong with both on one
           CPU and on two; a process sleeping in epoll on an eventfd woken from the other
           CPU, and woken by a process polling on its own CPU that the other CPU asks
           through shared memory; a turn passed between two processes polling on one CPU
           by sched_yield alone (how crossed scripts and nodes hand over).
  packet   the rtt rows over AF_PACKET (one network namespace per node, veth pair), against
           a bare Python AF_PACKET ping-pong over the very same veth pair (another
           EtherType, so the nodes never see it; measured while the nodes are idle).
           Then the same with each rank its node's kernel (`run_real_spmd(kernel="rank")`,
           ``dp pingpong --real --kernel rank``): two processes, as the bare ping-pong has --
           the same kernel, driver, 21140 model and DP, without the script-node hand-offs --
           beside a bare ping-pong over that cluster's veth pair, alternating.
           (The rtt row adds this arrangement over shm too.)
  alltoall an N-node packet cluster (`dp cluster up --nodes N --transport packet`): every
           node sends 20 numbered messages to every other; every one must arrive, in
           order; after ``dp cluster down`` no namespace, process, run directory or
           /dev/shm entry of the cluster may remain.

Round trips: median of --runs runs, each the median of --iters round trips (after a tenth
discarded as warm-up). The host is small and shared: compare rows of one run, not hosts.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import select
import socket
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import trio  # noqa: E402
from bench_packet import echo, round_trips_ns  # noqa: E402  (the bare AF_PACKET ping-pong's two sides)
from kernelsim.media.packet import PacketPort  # noqa: E402
from kernelsim.media.real import ShmLink  # noqa: E402
from libdp._realnode import cluster_down, cluster_up  # noqa: E402
from libdp import bandwidth  # noqa: E402
from libdp._realprograms import all_to_all, entry_costs, round_trips, trio_round_trips  # noqa: E402
from libdp._realrun import run_real_spmd  # noqa: E402

BARE_ETHERTYPE = 0x88B6        # not DP's: the nodes' sockets never see the bare ping-pong
_ctx = multiprocessing.get_context("fork")


def _median_us(samples_ns) -> float:
    s = samples_ns[len(samples_ns) // 10:]
    return statistics.median(s) / 1000


def _dp_rtt(cluster, iters: int, spin_us: float | None = None, tails: list | None = None,
            program=round_trips) -> float:
    """Median µs of `iters` round trips; `spin_us`: the scripts' DP_SPIN_US (None: the default
    waits). `tails` gets (mean, 99th percentile) of the same round trips: a median hides the
    waits a script spends behind a scheduler that has not given it the core yet. `program`:
    the blocking calls' ping-pong, or `trio_round_trips`."""
    old = os.environ.get("DP_SPIN_US")
    if spin_us is not None:
        os.environ["DP_SPIN_US"] = str(spin_us)     # the forked scripts' attach() reads it
    try:
        results, _ = run_real_spmd(program, iters, cluster=cluster.path, timeout=120.0)
    finally:
        if old is None:
            os.environ.pop("DP_SPIN_US", None)
        else:
            os.environ["DP_SPIN_US"] = old
    if tails is not None:
        s = sorted(results[0][len(results[0]) // 10:])
        tails.append((statistics.fmean(s) / 1000, s[int(len(s) * 0.99)] / 1000))
    return _median_us(results[0])


def _rtt_rows(label, cluster, args, baseline, unplaced=None, paired=None):
    """The DP round trip as `cluster` places its processes (default waits) beside `baseline()`;
    with `unplaced` (the same cluster with placement none) also that one's default waits and
    polling scripts -- the arrangement before placement, measured in the same run; with
    `paired` (placement pair) that one's."""
    keys = ["dp", "trio", "asleep"] + (["none", "poll"] if unplaced is not None else []) + (["pair"] if paired else [])
    got = {k: [] for k in keys + ["base"]}
    tails = []
    for _ in range(args.runs):
        got["dp"].append(_dp_rtt(cluster, args.iters, tails=tails))
        got["trio"].append(_dp_rtt(cluster, args.iters, program=trio_round_trips))
        got["asleep"].append(_dp_rtt(cluster, args.iters, spin_us=0))
        if paired is not None:
            got["pair"].append(_dp_rtt(paired, args.iters))
        if unplaced is not None:
            got["none"].append(_dp_rtt(unplaced, args.iters))
            got["poll"].append(_dp_rtt(unplaced, args.iters, args.spin_us))
        got["base"].append(baseline())
    med = {k: statistics.median(v) for k, v in got.items()}
    where = cluster.extra.get("placement", "none")
    _row(f"DP 1-byte RTT, {label}", med["dp"], "us", f"placement {where}; runs {_runs(got['dp'])}")
    _row("  same runs, mean | 99th percentile", statistics.median(m for m, _ in tails), "us",
         f"p99 {statistics.median(p for _, p in tails):.1f} us")
    _row("  same, the scripts' trio calls", med["trio"], "us", f"runs {_runs(got['trio'])}")
    _row("  same, scripts sleep at once (DP_SPIN_US=0)", med["asleep"], "us", f"runs {_runs(got['asleep'])}")
    if paired is not None:
        _row("  same, placement pair (nodes poll)", med["pair"], "us", f"runs {_runs(got['pair'])}")
    if unplaced is not None:
        _row("  same, placement none (all sleep)", med["none"], "us", f"runs {_runs(got['none'])}")
        _row(f"  same, placement none, scripts poll {args.spin_us:g} us", med["poll"], "us",
             f"runs {_runs(got['poll'])}")
    return med, got["base"]


def _runs(xs) -> str:
    return ", ".join(f"{x:.1f}" for x in xs)


# ------------------------------------------------------------------ baselines (no DP)


def _trio_echo(sock, iters):
    async def main():
        s = trio.socket.from_stdlib_socket(sock)
        for _ in range(iters):
            await s.send(await s.recv(16))
    trio.run(main)


def _trio_socketpair_rtt(iters: int) -> float:
    a, b = socket.socketpair()
    p = _ctx.Process(target=_trio_echo, args=(b, iters), daemon=True)
    p.start()
    b.close()

    async def main():
        s = trio.socket.from_stdlib_socket(a)
        perf = time.perf_counter_ns
        out = []
        for _ in range(iters):
            t = perf()
            await s.send(b"x")
            await s.recv(16)
            out.append(perf() - t)
        return out
    out = trio.run(main)
    p.join(5)
    a.close()
    return _median_us(out)


def _shm_sink(names, count):
    end = ShmLink.attach(names, 1)
    buf = bytearray(16384)
    recv_into, pending = end.recv_into, end.pending
    got = 0
    while got < count:
        if not pending():
            os.sched_yield()
            continue
        if recv_into(buf) >= 0:
            got += 1
    end.send(b"done")
    end.close()


def _bare_shm_stream(count: int, nbytes: int, frame_bytes: int) -> float:
    """MB/s of `nbytes` payload carried in frames of `frame_bytes` through a bare ShmLink."""
    link = ShmLink.create(slots=256, slot_bytes=max(2048, frame_bytes + 64))
    try:
        p = _ctx.Process(target=_shm_sink, args=(link.names, count), daemon=True)
        p.start()
        end = link.end(0)
        frame = b"d" * frame_bytes
        send = end.send
        buf = bytearray(64)
        t = time.perf_counter()
        for _ in range(count):
            while not send(frame):
                os.sched_yield()
        while end.recv_into(buf) < 0:
            os.sched_yield()
        dt = time.perf_counter() - t
        p.join(5)
        end.close()
        return count * nbytes / dt / 1e6
    finally:
        link.close()
        link.unlink()


def _packet_echo(ns, ifname, stop):
    from pyroute2.netns import setns
    setns(ns, flags=0)
    with PacketPort.open(ifname, BARE_ETHERTYPE) as port:
        echo(port, stop)


def _bare_packet_rtt(cluster, iters: int) -> float:
    """The same veth pair the nodes use, another EtherType: a bare Python AF_PACKET ping-pong
    (bench_packet.py's raw row)."""
    (ns0, if0), (ns1, if1) = [(n.netns, n.iface) for n in cluster.nodes[:2]]
    mac = [bytes.fromhex(n.mac.replace(":", "")) for n in cluster.nodes[:2]]
    head = mac[1] + mac[0] + BARE_ETHERTYPE.to_bytes(2, "big")
    ping, stop = head + b"x".ljust(46, b"\0"), head + b"STOP".ljust(46, b"\0")
    with PacketPort.open(if0, BARE_ETHERTYPE, netns=ns0) as port:
        p = _ctx.Process(target=_packet_echo, args=(ns1, if1, stop), daemon=True)
        p.start()
        buf = bytearray(port.max_frame)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:          # the echo is up once a ping comes back
            port.send(ping)
            time.sleep(0.01)
            if port.recv_into(buf) >= 0:
                break
        while port.recv_into(buf) >= 0:
            pass
        out = round_trips_ns(port, ping, iters)
        port.send(stop)
        p.join(5)
        if p.is_alive():
            p.kill()
        return _median_us(out)


# ------------------------------------------------------------------ the hops alone

_FLOOR_HOPS = ("s0n0", "n0n1", "n1s1", "s1n1", "n1n0", "n0s0")


def _floor_wait(rings, spin_s):
    """Until one of `rings` holds a frame: poll (yielding) up to `spin_s`, then sleep on the doorbells."""
    end = time.perf_counter() + spin_s
    while True:
        for r in rings:
            if r.pending():
                return
        if time.perf_counter() < end:
            os.sched_yield()
            continue
        if all(r.prepare_to_sleep() for r in rings):
            select.select([r.doorbell_fileno() for r in rings], [], [], 1.0)
        for r in rings:
            r.cancel_sleep()
            r.drain_doorbell()


def _floor_node(prefix, inbound, outbound, spin_s, work_s, cpu=None):
    from kernelsim.media._shmring import ShmRing
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    ins = [ShmRing.attach(prefix + n) for n in inbound]
    outs = [ShmRing.attach(prefix + n) for n in outbound]
    buf = bytearray(64)
    while True:
        _floor_wait(ins, spin_s)
        for i, r in enumerate(ins):
            k = r.recv_into(buf)
            if k < 0:
                continue
            end = time.perf_counter() + work_s       # a node's own work on the frame
            while time.perf_counter() < end:
                pass
            if buf[0] == 0x51:                      # b"Q": pass it on, stop
                for o in outs:
                    o.send(b"Q")
                return
            outs[i].send(buf[:k])


def _floor_rtt(iters: int, spin_s: float, work_s: float, placement: str = "none") -> float:
    """Median µs of a 1-byte round trip along the six ring hops of a DP round trip, no DP.
    `placement` ``cross`` or ``pair``: placed as ``dp cluster up`` places a 2-node cluster
    on a small host (each "node" on a CPU of its own, each "script" on the other node's or
    its own node's; the nodes poll `spin_s`, and so do crossed scripts: paired ones sleep)."""
    from kernelsim.media._shmring import ShmRing
    from libdp._realnode import plan_placement, script_cpu
    prefix = f"dpfloor{os.getpid()}-"
    rings = {n: ShmRing.create(prefix + n, 64, 256) for n in _FLOOR_HOPS}
    placed = placement != "none"
    cpu = plan_placement(2, placement)[1] if placed else {0: None, 1: None}
    scripts = [script_cpu(placement, cpu[n], cpu.values()) if placed else None for n in (0, 1)]
    script_spin = 0.0 if placement == "pair" else spin_s
    procs = [_ctx.Process(target=_floor_node, args=(prefix, ["s0n0", "n1n0"], ["n0n1", "n0s0"], spin_s, work_s, cpu[0])),
             _ctx.Process(target=_floor_node, args=(prefix, ["n0n1", "s1n1"], ["n1s1", "n1n0"], spin_s, work_s, cpu[1])),
             _ctx.Process(target=_floor_node, args=(prefix, ["n1s1"], ["s1n1"], script_spin, 0.0, scripts[1]))]  # script 1 echoes
    mask = os.sched_getaffinity(0)
    try:
        for p in procs:
            p.start()
        if scripts[0] is not None:
            os.sched_setaffinity(0, {scripts[0]})           # this process is script 0
        out_ring, in_ring = rings["s0n0"], rings["n0s0"]
        buf = bytearray(64)
        perf = time.perf_counter_ns
        out = []
        for _ in range(iters):
            t = perf()
            out_ring.send(b"x")
            while True:
                _floor_wait([in_ring], script_spin)
                if in_ring.recv_into(buf) >= 0:
                    break
            out.append(perf() - t)
        out_ring.send(b"Q")
        for p in procs:
            p.join(5)
        return _median_us(out)
    finally:
        os.sched_setaffinity(0, mask)
        for p in procs:
            if p.is_alive():
                p.kill()
        for r in rings.values():
            r.unlink()
            r.close()


def bench_floor(args):
    spin = args.spin_us * 1e-6
    work = args.floor_work_us * 1e-6
    rows = {"sleeping on doorbells": (0.0, 0.0, "none"), f"polling {args.spin_us:g} us first": (spin, 0.0, "none"),
            f"polling, {args.floor_work_us:g} us work per node pass": (spin, work, "none")}
    for placement in ("cross", "pair"):
        rows[f"{placement} placement, nodes poll"] = (spin, 0.0, placement)
        rows[f"{placement} placement, nodes poll, {args.floor_work_us:g} us work"] = (spin, work, placement)
    out = {}
    for label, (s, w, placement) in rows.items():
        runs = [_floor_rtt(args.iters, s, w, placement) for _ in range(args.runs)]
        out[label] = statistics.median(runs)
        _row(f"hops alone, {label}", out[label], "us", f"runs {', '.join(f'{x:.1f}' for x in runs)}")
    print("# floor: six ring hops among four processes, no DP; a DP round trip adds four node passes "
          "(gate entry -> transmit, frame -> Token Buffer Pool) of node CPU", flush=True)
    return out


# ------------------------------------------------------------------ hand-offs

_WORD_REQ, _WORD_ACK, _WORD_STOP = 0, 8, 16


def _pipe_pingpong(cpu_a: int, cpu_b: int, iters: int) -> float:
    """Median µs of a 1-byte pipe ping-pong, blocking reads, the two processes on these CPUs."""
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.sched_setaffinity(0, {cpu_b})
            while os.read(r1, 1) == b"x":
                os.write(w2, b"x")
        finally:
            os._exit(0)
    mask = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {cpu_a})
        perf, out = time.perf_counter_ns, []
        for _ in range(iters):
            t = perf()
            os.write(w1, b"x")
            os.read(r2, 1)
            out.append(perf() - t)
        return _median_us(out)
    finally:
        os.write(w1, b"Q")
        os.waitpid(pid, 0)
        os.sched_setaffinity(0, mask)
        for fd in (r1, w1, r2, w2):
            os.close(fd)


def _yield_turns(cpu: int, turns: int) -> float:
    """Mean µs of one turn handed between two processes on `cpu` by sched_yield alone: each
    polls a word in shared memory and yields -- what a crossed script and the node on its
    core pay per hand-off when both poll (Python loops; the switch itself is most of it)."""
    import mmap
    shm = mmap.mmap(-1, 64)
    kids = []
    for me in (0, 1):
        pid = os.fork()
        if pid == 0:
            try:
                os.sched_setaffinity(0, {cpu})
                n = 0
                while True:
                    v = shm[0]
                    if v == 2:
                        break
                    if v == me:
                        n += 1
                        shm[0] = 2 if n >= turns else 1 - me
                    os.sched_yield()
            finally:
                os._exit(0)
        kids.append(pid)
    t = time.perf_counter()
    for pid in kids:
        os.waitpid(pid, 0)
    shm.close()
    return (time.perf_counter() - t) / (2 * turns) * 1e6


def _wake_latency(cpus, proxy: bool, iters: int) -> float:
    """Median µs from a request on CPU cpus[1] to the answer of a process sleeping (epoll on an
    eventfd) on cpus[0] beside a process polling there (yielding): the requester writes the
    eventfd itself (a cross-CPU wake-up), or -- `proxy` -- only a word in shared memory that
    the poller sees and answers by writing the eventfd (a wake-up on the sleeper's CPU)."""
    import mmap
    import struct
    shm = mmap.mmap(-1, 4096)
    efd = os.eventfd(0, os.EFD_NONBLOCK)
    word = struct.Struct("<q")

    def sleeper():
        ep = select.epoll()
        ep.register(efd, select.EPOLLIN)
        while not word.unpack_from(shm, _WORD_STOP)[0]:
            ep.poll(0.1)
            try:
                os.eventfd_read(efd)
            except BlockingIOError:
                pass
            word.pack_into(shm, _WORD_ACK, word.unpack_from(shm, _WORD_REQ)[0])

    def poller():
        seen = 0
        while not word.unpack_from(shm, _WORD_STOP)[0]:
            req = word.unpack_from(shm, _WORD_REQ)[0]
            if proxy and req != seen:
                seen = req
                os.eventfd_write(efd, 1)
            else:
                os.sched_yield()

    kids = []
    for fn in (sleeper, poller):
        pid = os.fork()
        if pid == 0:
            try:
                os.sched_setaffinity(0, {cpus[0]})
                fn()
            finally:
                os._exit(0)
        kids.append(pid)
    mask = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {cpus[1]})
        time.sleep(0.05)
        perf, out = time.perf_counter_ns, []
        for i in range(1, iters + 1):
            t = perf()
            word.pack_into(shm, _WORD_REQ, i)
            if not proxy:
                os.eventfd_write(efd, 1)
            deadline = time.perf_counter() + 1.0
            while word.unpack_from(shm, _WORD_ACK)[0] != i:
                if time.perf_counter() > deadline:      # never hang: ask again
                    os.eventfd_write(efd, 1)
                    deadline = time.perf_counter() + 1.0
            out.append(perf() - t)
            time.sleep(20e-6)
        return _median_us(out)
    finally:
        word.pack_into(shm, _WORD_STOP, 1)
        os.eventfd_write(efd, 1)
        for pid in kids:
            os.waitpid(pid, 0)
        os.sched_setaffinity(0, mask)
        os.close(efd)
        shm.close()


def bench_handoff(args):
    """What one hand-off between processes costs on this host, without DP: the unit a round
    trip between attached scripts pays four times (docs/real-nodes.md)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("# handoff: skipped (needs two CPUs)")
        return {}
    a, b = cpus[0], cpus[1]
    rows = {"pipe ping-pong, both on one CPU (two context switches)": lambda: _pipe_pingpong(a, a, args.iters),
            "pipe ping-pong, on two CPUs (two cross-CPU wake-ups)": lambda: _pipe_pingpong(a, b, args.iters),
            "a sleeper woken from the other CPU": lambda: _wake_latency((a, b), False, args.iters),
            "a sleeper woken by a poller on its own CPU": lambda: _wake_latency((a, b), True, args.iters),
            "a turn handed over by sched_yield, two pollers on one CPU (mean)": lambda: _yield_turns(a, 20 * args.iters)}
    out = {}
    for label, fn in rows.items():
        runs = [fn() for _ in range(args.runs)]
        out[label] = statistics.median(runs)
        _row(label, out[label], "us", f"runs {_runs(runs)}")
    print("# handoff: a DP round trip between attached scripts makes at least four hand-offs (crossed: "
          "each a yield between two pollers on a core) beside its four node passes", flush=True)
    return out


# ------------------------------------------------------------------ rows


def _row(label, value, unit, note=""):
    print(f"  {label:<46}{value:>10.2f} {unit:<5} {note}", flush=True)


def bench_rtt(args, cluster):
    unplaced = cluster_up(2, name=f"bsn{os.getpid()}", transport="shm", tied=True, placement="none")
    paired = cluster_up(2, name=f"bsp{os.getpid()}", transport="shm", tied=True, placement="pair")
    try:
        m, base = _rtt_rows("script-node-shm-node-script", cluster, args, lambda: _trio_socketpair_rtt(args.iters),
                            unplaced, paired)
    finally:
        cluster_down(paired)
        cluster_down(unplaced)
    s = m["base"]
    _row("trio socketpair ping-pong, 2 processes", s, "us", f"runs {_runs(base)}")
    print(f"# rtt: DP {s / m['dp']:.2f}x faster than trio socketpair (target >= 2x, <= 20 us); placement none: "
          f"{s / m['none']:.2f}x, with polling scripts {s / m['poll']:.2f}x", flush=True)
    r = cluster_up(2, name=f"bsr{os.getpid()}", transport="shm", tied=True, start=False)
    try:
        rank, _ = _rank_rows("over shm", r, args)
    finally:
        cluster_down(r)
    print(f"# rtt, two processes: DP with each rank its node's kernel {s / rank:.2f}x faster than trio socketpair "
          f"(moonshot of the node-process row: <= 5 us)", flush=True)
    return {"dp_rtt_us": m["dp"], "dp_rtt_trio_us": m["trio"], "dp_rtt_none_us": m["none"], "dp_rtt_none_polling_us": m["poll"],
            "trio_socketpair_rtt_us": s, "dp_rtt_kernel_rank_us": rank}


def bench_gate(args, cluster):
    results, _ = run_real_spmd(entry_costs, args.count, args.runs, nodes=1, cluster=cluster.path, timeout=300.0)
    g, w = results[0]["dp_write"], results[0]["write"]
    _row("dp_write, call gate (submission ring)", g, "us")
    _row("write(), generic entry (control socket)", w, "us")
    print(f"# gate: {w / g:.2f}x cheaper per call than the generic entry (target >= 2x)", flush=True)
    return {"gate_us": g, "generic_us": w}


def _dp_stream(cluster, args, size: int, ack_floor_s: float | None) -> dict:
    """One `libdp.bandwidth` run; `ack_floor_s`: libdp._bench.ACK_TIMEOUT_MIN_REAL_S for it (None: as is)."""
    import libdp._bench as bench
    old = bench.ACK_TIMEOUT_MIN_REAL_S
    if ack_floor_s is not None:
        bench.ACK_TIMEOUT_MIN_REAL_S = ack_floor_s  # the forked ranks inherit it
    try:
        windows = max(1, args.stream_count // args.window)
        results, _ = run_real_spmd(bandwidth, [size], windows, args.window, nodes=2, cluster=cluster.path,
                                   timeout=300.0)
    finally:
        bench.ACK_TIMEOUT_MIN_REAL_S = old
    return results[0][0]


def bench_stream(args, cluster):
    """The stream as `cluster` runs it (the default arrangement), beside the same cluster
    with placement pair and with placement none."""
    size = 1500                             # the largest DP message of the cluster's 21140
    rows = {f"as is (placement {cluster.extra.get('placement', 'none')}, nodes poll)":
            _dp_stream(cluster, args, size, None)}
    for label, kw in (("placement pair, nodes poll", {"placement": "pair"}),
                      ("placement none", {"placement": "none"})):
        other = cluster_up(2, name=f"bst{os.getpid()}", transport="shm", tied=True, **kw)
        try:
            rows[label] = _dp_stream(other, args, size, None)
        finally:
            cluster_down(other)
    if args.ack_floor_ms is not None:
        rows[f"ack floor {args.ack_floor_ms:g} ms"] = _dp_stream(cluster, args, size, args.ack_floor_ms / 1e3)
    frame = size + 64                       # about the size of its frame (DP and Ethernet headers) on the ring
    bare = _bare_shm_stream(args.stream_count, size, frame)
    for label, row in rows.items():
        _row(f"DP stream, {size} B, {label}", row["mbytes_per_s"], "MB/s",
             f"{row['delivered']}/{row['messages']} delivered, windows of {args.window}, "
             f"{row['unacked_windows']} unacked")
    _row(f"bare ShmLink stream, {frame}-byte frames", bare, "MB/s")
    mbs = max(r["mbytes_per_s"] for r in rows.values())
    print(f"# stream: DP at best {mbs:.0f} MB/s = {mbs / bare:.3f} of the bare ring (target >= 300 MB/s)", flush=True)
    return {"dp_stream_mbs": {k: r["mbytes_per_s"] for k, r in rows.items()}, "bare_ring_mbs": bare}


def bench_packet(args):
    c = cluster_up(2, name=f"bpk{os.getpid()}", transport="packet", tied=True)
    try:
        u = cluster_up(2, name=f"bpn{os.getpid()}", transport="packet", tied=True, placement="none")
        try:
            m, bare = _rtt_rows("over AF_PACKET/veth, netns", c, args, lambda: _bare_packet_rtt(c, args.iters), u)
        finally:
            cluster_down(u)
        # (placement pair over AF_PACKET is not measured here: bringing a third packet
        # cluster up costs seconds of namespaces; the shm rows compare the placements)
    finally:
        cluster_down(c)
    b = m["base"]
    _row("bare AF_PACKET ping-pong, same veth pair", b, "us", f"runs {_runs(bare)}")
    print(f"# packet: DP = {m['dp'] / b:.2f}x the bare ping-pong (target <= 2x); placement none {m['none'] / b:.2f}x, "
          f"with polling scripts {m['poll'] / b:.2f}x", flush=True)
    r = cluster_up(2, name=f"bpr{os.getpid()}", transport="packet", tied=True, start=False)
    try:
        rank, bare2 = _rank_rows("over AF_PACKET/veth, netns", r, args, lambda: _bare_packet_rtt(r, args.iters))
    finally:
        cluster_down(r)
    b2 = statistics.median(bare2)
    _row("bare AF_PACKET ping-pong, same veth pair", b2, "us", f"runs {_runs(bare2)}")
    print(f"# packet, two processes each way: DP with each rank its node's kernel = {rank / b2:.2f}x the bare "
          f"ping-pong (target <= 2x)", flush=True)
    return {"dp_packet_rtt_us": m["dp"], "dp_packet_rtt_none_us": m["none"],
            "dp_packet_rtt_none_polling_us": m["poll"], "bare_packet_rtt_us": b,
            "dp_packet_rtt_kernel_rank_us": rank, "bare_packet_rtt_beside_rank_us": b2}


def _rank_rows(label, cluster, args, baseline=None):
    """DP's round trip with each rank its node's kernel (``kernel="rank"``: two processes,
    as many as the bare ping-pong has), alternating with `baseline()` if given, --runs times."""
    got, base = [], []
    for _ in range(args.runs):
        results, _ = run_real_spmd(round_trips, args.iters, cluster=cluster.path, kernel="rank", timeout=120.0)
        got.append(_median_us(results[0]))
        if baseline is not None:
            base.append(baseline())
    dp = statistics.median(got)
    _row(f"DP 1-byte RTT, {label}, each rank its node's kernel", dp, "us",
         f"placement {cluster.extra.get('placement', 'none')}; runs {_runs(got)}")
    return dp, base


def bench_alltoall(args):
    name = f"a2a{os.getpid()}"
    t = time.perf_counter()
    c = cluster_up(args.nodes, name=name, transport="packet", tied=True)
    up = time.perf_counter() - t
    try:
        t = time.perf_counter()
        results, _ = run_real_spmd(all_to_all, nodes=args.nodes, cluster=c.path, timeout=300.0)
        ran = time.perf_counter() - t
    finally:
        t = time.perf_counter()
        done = cluster_down(c)
        down = time.perf_counter() - t
    missing = sum(1 for rank, got in enumerate(results) for peer, msgs in got.items()
                  if msgs != [f"{peer}->{rank}#{k}" for k in range(20)])
    expected = args.nodes * (args.nodes - 1) * 20
    from pyroute2 import netns
    left = {"namespaces": [n for n in netns.listnetns() if n.startswith(f"dp-{name}"[:12])],
            "shm": [n for n in os.listdir("/dev/shm") if name in n],
            "run_dir": os.path.exists(c.run_dir),
            "processes": [p for p in _node_pids(c.run_dir)]}
    ok = missing == 0 and not any(left.values())
    print(f"  {args.nodes}-node packet all-to-all: {expected} messages, {missing} streams incomplete; "
          f"up {up:.1f} s, run {ran:.1f} s, down {down:.1f} s; namespaces removed "
          f"{len(done['namespaces_removed'])}; left behind: {left}", flush=True)
    print(f"# alltoall: {'every message arrived, nothing left behind' if ok else 'FAILED'}", flush=True)
    return {"nodes": args.nodes, "messages": expected, "incomplete": missing, "left": left, "ok": ok}


def _node_pids(run_dir: str) -> list[int]:
    """Processes still running a node of this run directory (its command line names it)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if run_dir.encode() in f.read():
                    out.append(int(pid))
        except OSError:
            pass
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="rtt,floor,handoff,gate,stream,packet,alltoall")
    ap.add_argument("--iters", type=int, default=2000, help="round trips per run (default 2000)")
    ap.add_argument("--runs", type=int, default=3, help="runs per round-trip row, turns per gate row")
    ap.add_argument("--count", type=int, default=20000, help="calls per gate row")
    ap.add_argument("--stream-count", type=int, default=100000,
                    help="messages per stream row (default 100000, about half a second; 20000 ran slower and "
                         "more variably on the development host: 178-269 against 265-309 MB/s crossed)")
    ap.add_argument("--window", type=int, default=64, help="messages per window of the stream row")
    ap.add_argument("--nodes", type=int, default=8, help="nodes of the all-to-all cluster (default 8)")
    ap.add_argument("--ack-floor-ms", type=float, default=None,
                    help="add a stream row with libdp._bench's real-time ack-timeout floor set to this (0.5: the modeled floor)")
    ap.add_argument("--spin-us", type=float, default=1000.0,
                    help="the polling scripts' DP_SPIN_US in the round-trip rows (default 1000)")
    ap.add_argument("--floor-work-us", type=float, default=5.0,
                    help="the floor's third row: busy work per node pass (default 5 us, about what one pass of "
                         "the kernel path costs in CPU on the development host)")
    args = ap.parse_args(argv)
    rows = set(args.only.split(","))
    print(f"# real nodes, python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.2f}; wall clock", flush=True)
    t = time.perf_counter()
    if rows & {"rtt", "gate", "stream"}:
        c = cluster_up(2, name=f"bsh{os.getpid()}", transport="shm", tied=True)
        try:
            if "rtt" in rows:
                bench_rtt(args, c)
            if "gate" in rows:
                bench_gate(args, c)
            if "stream" in rows:
                bench_stream(args, c)
        finally:
            cluster_down(c)
    if "floor" in rows:
        bench_floor(args)
    if "handoff" in rows:
        bench_handoff(args)
    if rows & {"packet", "alltoall"}:
        from kernelsim.media.netns import NetnsCluster
        ok, why = NetnsCluster.available()
        if not ok:
            print(f"# packet, alltoall: skipped ({why})")
        else:
            if "packet" in rows:
                bench_packet(args)
            if "alltoall" in rows:
                bench_alltoall(args)
    print(f"# total {time.perf_counter() - t:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
