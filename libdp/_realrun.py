"""Real time: a program run once per node of a cluster of real nodes.

`run_real_spmd` is what ``dp pingpong --real`` and the other measurements run under. It
is an ordinary client of real nodes (`libdp._realnode`): it brings a cluster up on this
host for the run -- N node processes over shared memory, UDP on loopback, or raw Ethernet
between network namespaces -- or uses a running one (``cluster=FILE``), forks one process
per rank that attaches to its node (`libdp.attach`) and runs ``program(dp, rank, size,
*args)`` under trio, collects each rank's result and its node's statistics through a
pipe, and brings the cluster down again if it made it.

Dead peers: the parent waits on every rank's pipe *and* its process at once, so a rank
that dies (killed, crashed) ends the run at once with an error naming it, and the other
ranks are killed rather than left retrying; a rank also dies with its parent. A node
that dies wakes its rank's calls with ENETDOWN, which fails the run naming the node.

Faults (``fault.*``): on the packet transport a netem qdisc on the veths (the kernel's
own loss, corruption, duplication and reordering); on shared memory and UDP -- or where
the kernel has no netem -- the receiving adapters' seeded injector. A link rate
(``link.rate_bps`` given with --param) shapes the veths; over shm and UDP it cannot be
applied and is refused.
"""
from __future__ import annotations

import ctypes
import errno
import functools
import multiprocessing
import multiprocessing.connection
import os
import secrets
import signal
import time
import traceback

import trio

from kernelsim import RunnableCounter
from kernelsim.media.netns import LinkShape

__all__ = ["run_real_spmd", "link_shape", "die_with_parent", "TRANSPORTS", "KERNELS"]

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Linux: this process gets SIGKILL when the one that forked it exits (no orphans)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):   # pragma: no cover - not Linux
        pass


def _child(rank, size, run, program, args, conn):
    """One rank: ``run(rank, size, program, args) -> (result, node statistics)``, its
    outcome sent to the parent whatever happens."""
    try:
        die_with_parent()
        result, stats = run(rank, size, program, args)
        conn.send(("ok", result, stats))
    except BaseException as exc:   # report everything, the parent decides
        conn.send(("error", _describe(exc), None))
    finally:
        conn.close()


def _attached(run_dir, rank, size, program, args):
    """kernel="node": the rank attaches to its node's process, as any script does."""
    from libdp._attach import attach
    dp = attach(node=rank, run_dir=run_dir, name=f"{_name(program)}[{rank}]")
    result = trio.run(program, dp, rank, size, *args, instruments=[RunnableCounter()])   # see `_as_node`
    stats = dp.node.stats()
    dp.detach()
    return result, stats


def _as_node(cluster, rank, size, program, args):
    """kernel="rank": the rank is its node (`run_as_node`)."""
    from libdp._realnode import run_as_node
    return run_as_node(cluster, rank, size, program, args, name=_name(program))


def _name(program) -> str:
    return getattr(program, "__name__", "spmd")


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
KERNELS = ("node", "rank")


def link_shape(profile) -> LinkShape | None:
    """The faults (and a link rate given with --param) asked of a real link, or None."""
    rate = profile.overrides.get("link.rate_bps")
    shape = LinkShape(loss=profile.get("fault.loss", 0.0), corrupt=profile.get("fault.corrupt", 0.0),
                      duplicate=profile.get("fault.duplicate", 0.0), reorder=profile.get("fault.reorder", 0.0),
                      reorder_delay_s=profile.get("fault.reorder_delay_s", 0.0),
                      rate_bps=None if rate is None else float(rate))
    return shape if shape.faulty or shape.rate_bps is not None else None


def run_real_spmd(program, *args, nodes: int = 2, platform: str | None = None, nic: str | None = None,
                  params=(), load=(), timeout: float = 300.0, transport: str = "shm", seed: int = 0,
                  cluster: str | None = None, placement: str = "auto", kernel: str = "node"):
    """Run ``program(dp, rank, size, *args)`` on `nodes` real nodes; return (results, stats).

    `cluster`: a running cluster's file (its first `nodes` nodes); else a cluster of
    `nodes` nodes is brought up on this host for the run and down after it, its processes
    placed by `placement` (`libdp._realnode.plan_placement`).

    `kernel`: ``node`` -- each rank attaches to its node's process (`libdp.attach`), as any
    script does; ``rank`` -- each rank runs its node's kernel itself (`run_as_node`): one
    process per node and no hand-off between program and kernel, as DP's own user
    processes trap into their kernel. A `cluster` given with ``rank`` must have no node
    running (EBUSY).
    """
    from libdp._realnode import cluster_down, cluster_up, find_cluster
    if transport not in TRANSPORTS:
        raise OSError(errno.EINVAL, f"real transport is one of {', '.join(TRANSPORTS)}, not {transport!r}")
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise OSError(errno.EINVAL, f"a run needs at least one node, not {nodes!r}")
    if kernel not in KERNELS:
        raise OSError(errno.EINVAL, f"kernel is one of {', '.join(KERNELS)}, not {kernel!r}")
    made = None
    if cluster is not None:
        c = find_cluster(cluster)
        if nodes > len(c.nodes):
            raise OSError(errno.EINVAL, f"cluster {c.name!r} has {len(c.nodes)} nodes, not {nodes}")
    else:
        c = made = cluster_up(nodes, name=f"run-{os.getpid()}-{secrets.token_hex(3)}", transport=transport,
                              nic=nic, platform=platform, params=params, load=load, seed=seed, tied=True,
                              placement=placement, start=kernel == "node")
    run = functools.partial(_as_node, c) if kernel == "rank" else functools.partial(_attached, c.run_dir)
    ctx = multiprocessing.get_context("fork")
    procs, pipes = [], []
    finished = False
    try:
        for rank in range(nodes):
            parent_end, child_end = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_child, args=(rank, nodes, run, program, args, child_end), daemon=True)
            p.start()
            child_end.close()
            procs.append(p)
            pipes.append(parent_end)
        results, stats = _collect(procs, pipes, timeout)
        finished = True
        return results, stats
    finally:
        for p in procs:                 # after a failure the others are not waited for
            p.join(timeout=2 if finished else 0)
            if p.is_alive():
                p.kill()
                p.join(timeout=2)
        if made is not None:
            cluster_down(made)
