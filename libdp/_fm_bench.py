"""FM's measurements, as programs over `libdp.fm`: ping-pong and streaming bandwidth.

* `fm_pingpong_program`: node 0 sends an n-byte message to node 1, whose handler takes
  it; node 1's main loop sees it and sends one back; one-way latency is half the round
  trip (FM-B01: 8.8 us for zero bytes on HPVM 1.9).
* `fm_bandwidth_program`: node 0 streams `count` messages of n bytes to node 1 and waits
  for a one-word acknowledgement sent once node 1's handlers have taken them all;
  bandwidth = bytes / time, MB = 10^6 bytes (FM-B02: 100+ MB/s); `summarize` gives r_inf
  and n_1/2.

Both run as FM node 0 and node 1 of a job: on two hosts over Myrinet
(``transport="myrinet"``), or as two processes of one host -- on its two CPUs -- over
the shared-memory transport (``"smt"``). `run_job` runs such a job in modeled time;
`real_smt_pingpong` runs the ping-pong between two real processes.
"""
from __future__ import annotations

import array
import errno
import multiprocessing
import os
import statistics
import time
import traceback

import trio

from libdp._am_bench import summarize
from libdp.fm import FM

__all__ = ["fm_pingpong_program", "fm_bandwidth_program", "run_job", "placement_for", "summarize",
           "real_smt_pingpong", "real_smt_bandwidth", "cpus_for", "DEFAULT_PP_SIZES", "DEFAULT_BW_MESSAGES", "DEFAULT_BW_SIZES", "PAPER_LATENCY_US", "PAPER_BANDWIDTH",
           "TRANSPORTS"]

PAPER_LATENCY_US = 8.8          # FM-B01
PAPER_BANDWIDTH = 100.0         # FM-B02: "100+ MB/s"
DEFAULT_PP_SIZES = (0, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
DEFAULT_BW_SIZES = (16, 32, 64, 128, 160, 192, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
DEFAULT_BW_MESSAGES = 2000     # at most this many messages per size: a steady stream, in little wall time
TRANSPORTS = ("myrinet", "smt")
H_PING, H_DATA, H_ACK = 1, 2, 3
PROGRAM = 0x4650                # the job's program ID
START_STAGGER_S = 1e-9          # modeled seconds between the starts of a job's processes


def placement_for(transport: str) -> tuple:
    """Hosts of FM nodes 0 and 1: two hosts over Myrinet, one host's two CPUs over shared memory."""
    if transport not in TRANSPORTS:
        raise OSError(errno.EINVAL, f"FM transport is one of {', '.join(TRANSPORTS)}, not {transport!r}")
    return (0, 1) if transport == "myrinet" else (0, 0)


async def fm_pingpong_program(dp, vnode, placement, sizes=DEFAULT_PP_SIZES, iters=1000, warmup=10):
    fm = await FM.open(dp, PROGRAM, placement, vnode)
    count = [0]

    async def ping(stream, src):
        await stream.receive(stream.length)
        count[0] += 1

    fm.set_handler(H_PING, ping)
    peer = 1 - vnode
    rows = []
    try:
        for n in sizes:
            msg = bytes(n)
            count[0] = 0
            total = warmup + iters
            t0 = dp.now()
            for i in range(total):
                if i == warmup:
                    t0 = dp.now()
                if vnode == 0:
                    await fm.send(peer, H_PING, msg)
                    await fm.extract_until(lambda i=i: count[0] > i)
                else:
                    await fm.extract_until(lambda i=i: count[0] > i)
                    await fm.send(peer, H_PING, msg)
            rtt = (dp.now() - t0) / iters
            rows.append({"size": n, "one_way_us": rtt * 1e6 / 2, "rtt_us": rtt * 1e6})
        stats = fm.stats()
    finally:
        await fm.close()
    return rows if vnode == 0 else None, stats


async def fm_bandwidth_program(dp, vnode, placement, sizes=DEFAULT_BW_SIZES, total=1 << 20, max_messages=None,
                               progress=None):
    fm = await FM.open(dp, PROGRAM, placement, vnode)
    got = {"n": 0, "bytes": 0, "ack": 0}
    buf = bytearray(max(sizes))

    async def data(stream, src):
        got["bytes"] += await stream.receive_into(buf, stream.length)
        got["n"] += 1

    async def ack(stream, src):
        await stream.receive(stream.length)
        got["ack"] += 1

    fm.set_handler(H_DATA, data)
    fm.set_handler(H_ACK, ack)
    peer = 1 - vnode
    rows = []
    try:
        for k, n in enumerate(sizes):
            count = max(1, total // n)
            if max_messages:
                count = min(count, max_messages)
            if vnode == 0:
                msg = bytes(n)
                t0 = dp.now()
                for _ in range(count):
                    await fm.send(peer, H_DATA, msg)
                await fm.extract_until(lambda k=k: got["ack"] > k)
                elapsed = dp.now() - t0
                rows.append({"size": n, "mbytes_per_s": n * count / elapsed / 1e6, "messages": count,
                             "time_us": elapsed * 1e6})
                if progress is not None:
                    progress(rows[-1])
            else:
                await fm.extract_until(lambda count=count: got["n"] >= count)
                if got["bytes"] != n * count:
                    raise AssertionError(f"FM bandwidth: {got['bytes']} bytes arrived of {n * count}")
                got["n"] = got["bytes"] = 0
                await fm.send(peer, H_ACK, b"\0\0\0\0")
        stats = fm.stats()
    finally:
        await fm.close()
    return rows if vnode == 0 else None, stats


def run_job(cluster, program, placement, *args):
    """Run ``program(dp, vnode, placement, *args)`` for each FM node of the job, each as a
    process on its host, in the cluster's modeled time; results by node."""
    results = [None] * len(placement)

    async def one(vnode):
        # Processes that start at the same modeled instant would race for the shared
        # region's IDs in whatever order trio runs them (it shuffles a batch): they start
        # START_STAGGER_S apart in vnode order instead, so a run is the same every time.
        await trio.sleep(vnode * START_STAGGER_S)
        dp = cluster.process(placement[vnode], getattr(program, "__name__", "fm"))
        results[vnode] = await program(dp, vnode, placement, *args)

    async def job():
        async with trio.open_nursery() as nursery:
            for v in range(len(placement)):
                nursery.start_soon(one, v)
        return results

    return cluster.run(job)


# -- real time: two real processes over the real shared-memory transport -----------------------


def _real_pingpong(fm, vnode, sizes, iters, warmup):
    """Node 0 times each round trip (``perf_counter_ns`` into a preallocated array):
    rows with the mean and the median, the statistic `bench_real_nodes` reports for its
    socketpair baseline -- on a busy host the mean carries every preemption of either
    spinning process, the median the round trip itself."""
    count = [0]

    async def ping(stream, src):
        await stream.receive(stream.length)
        count[0] += 1

    fm.set_handler(H_PING, ping)
    s = fm.sync
    send, extract_until = s.send, s.extract_until
    clock = time.perf_counter_ns
    rows = []
    for n in sizes:
        msg = bytes(n)
        count[0] = 0
        times = array.array("q", bytes(8 * iters))
        for i in range(warmup + iters):
            if vnode == 0:
                t = clock()
                send(1, H_PING, msg)
                extract_until(lambda i=i: count[0] > i)
                if i >= warmup:
                    times[i - warmup] = clock() - t
            else:
                extract_until(lambda i=i: count[0] > i)
                send(0, H_PING, msg)
        rtt = sum(times) / iters / 1e3
        rows.append({"size": n, "one_way_us": rtt / 2, "rtt_us": rtt,
                     "rtt_median_us": statistics.median(times) / 1e3})
    return rows


def _real_bandwidth(fm, vnode, sizes, count, _warmup):
    """Node 0 streams `count` messages of each size; node 1 acknowledges once its
    handlers took them all (as `fm_bandwidth_program`, in wall time)."""
    got = {"n": 0, "bytes": 0, "ack": 0}
    buf = bytearray(max(sizes))

    async def data(stream, src):
        got["bytes"] += await stream.receive_into(buf, stream.length)
        got["n"] += 1

    async def ack(stream, src):
        await stream.receive(stream.length)
        got["ack"] += 1

    fm.set_handler(H_DATA, data)
    fm.set_handler(H_ACK, ack)
    s = fm.sync
    rows = []
    for k, n in enumerate(sizes):
        if vnode == 0:
            msg = bytes(n)
            t0 = time.perf_counter()
            for _ in range(count):
                s.send(1, H_DATA, msg)
            s.extract_until(lambda k=k: got["ack"] > k)
            elapsed = time.perf_counter() - t0
            rows.append({"size": n, "mbytes_per_s": n * count / elapsed / 1e6, "messages": count,
                         "time_us": elapsed * 1e6})
        else:
            s.extract_until(lambda: got["n"] >= count)
            if got["bytes"] != n * count:
                raise AssertionError(f"FM bandwidth: {got['bytes']} bytes arrived of {n * count}")
            got["n"] = got["bytes"] = 0
            s.send(0, H_ACK, b"\0\0\0\0")
    return rows


def _real_child(body, vnode, name, sizes, iters, warmup, fm_params, cpu, conn):
    try:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        fm = FM.open_real(vnode, 2, PROGRAM, **{**fm_params, "smt_name": name})
        rows = body(fm, vnode, sizes, iters, warmup)
        stats = fm.stats()
        fm.sync.close()
        conn.send(("ok", rows, stats))
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}", None))
    finally:
        conn.close()


def real_smt_pingpong(sizes=(8,), iters=10000, warmup=100, timeout=120.0, fm_params=None, pin=True):
    """FM ping-pong between two real processes of this host over POSIX shared memory:
    (rows of node 0, stats of both), wall-clock microseconds. `pin`: each process on a
    CPU of its own (see `cpus_for`)."""
    return _real_job(_real_pingpong, sizes, iters, warmup, timeout, fm_params, pin)


def real_smt_bandwidth(sizes=(2048,), count=20000, timeout=120.0, fm_params=None, pin=True):
    """FM streaming between two real processes of this host over POSIX shared memory:
    (rows of node 0 with MB/s, MB = 10^6 bytes; stats of both)."""
    return _real_job(_real_bandwidth, sizes, count, 0, timeout, fm_params, pin)


def cpus_for(nodes: int, pin: bool = True) -> list:
    """The CPU each FM node of a real job runs on: the SMT is for processes on the
    processors of one SMP node (FM-C08), each spinning on its own queue, so with `pin`
    node v gets the v-th CPU this process may use (round robin); None leaves placement
    to the scheduler (and with one CPU there is nothing to pin)."""
    cpus = sorted(os.sched_getaffinity(0))
    if not pin or len(cpus) < 2:
        return [None] * nodes
    return [cpus[v % len(cpus)] for v in range(nodes)]


def _real_job(body, sizes, iters, warmup, timeout, fm_params, pin=True):
    name = f"/dp-fm-bench-{os.getpid()}-{time.monotonic_ns() & 0xFFFFFF}"
    ctx = multiprocessing.get_context("fork")
    procs, pipes = [], []
    cpus = cpus_for(2, pin)
    try:
        for v in range(2):
            parent, child = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_real_child, args=(body, v, name, tuple(sizes), iters, warmup, dict(fm_params or {}), cpus[v], child), daemon=True)
            p.start()
            child.close()
            procs.append(p)
            pipes.append(parent)
        out = []
        for v, conn in enumerate(pipes):
            if not conn.poll(timeout):
                raise TimeoutError(f"FM node {v} did not finish within {timeout} s")
            status, value, stats = conn.recv()
            if status != "ok":
                raise RuntimeError(f"FM node {v} failed: {value}")
            out.append((value, stats))
        return out[0][0], {"node0": out[0][1], "node1": out[1][1]}
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
        try:
            import _posixshmem
            _posixshmem.shm_unlink(name)
        except OSError:
            pass
