"""How fast the model runs: simulated 1-byte round trips per wall second, against SimPy.

For DP on the 21140, DP on Myrinet and AM on the TB2, a modeled ping-pong is timed at two
iteration counts and the rate taken from the difference (set-up and hand-shake cancel
out). Beside each, in the same process, a SimPy model of the same pipeline: two
processes handing one message back and forth, each direction a chain of timeouts ending
in an event that wakes the peer -- as many SimPy events per round trip as the dp model
has modeled instants per round trip (engine events plus the segment ends the CPU
advanced through without one, `Engine.advances`), at the same modeled delays. The
ratio dp/SimPy is the figure of merit; it does not depend on how loaded the machine is
as much as either rate alone -- as long as both runs see the same machine: each dp run is
paired with a SimPy run taken right after it, and the ratio printed is the median of the
pairs' ratios (`paired_rates`).

Every rate is given per wall second and per CPU second of this process
(``time.process_time``): on a machine shared with other work the second moves far less
from run to run, so compare before/after with it.

What trio's loop would cost: two bare trio tasks handing the turn back and forth
(``reschedule`` + ``wait_task_rescheduled``), two passes of trio's run loop per round trip.
A modeled DP ping-pong no longer pays it: a wait that wakes the peer steps the peer itself
when that is all trio's next pass would do (``kernelsim._trio``, "Handing the turn
over"); ``steps/RT`` is how many task steps per round trip were taken that way (AM's
rank 1 spins inside the engine and is never stepped at all).

Last, wall microseconds per engine event: dp's engine stepping a self-rescheduling
Python callback, next to a bare heapq loop doing the same, and what one event of the
ping-pong costs all in (wall time / engine events). ``--sweeps`` also times the two
sweeps issue 8 names: a 1 MB ``dp am-bandwidth`` sweep and a full
``dp bandwidth --nic myrinet --pipeline adaptive`` sweep.

    python -m pip install -e '.[bench]'          # SimPy
    python benchmarks/bench_sim_speed.py [--iters 20000] [--repeat 3] [--sweeps] [--json]
"""
from __future__ import annotations

import argparse
import contextlib
import heapq
import io
import json
import statistics
import time

from kernelsim import Engine
from libdp import Cluster, pingpong

SYSTEMS = {
    "DP/21140": ("dec21140", None),
    "DP/Myrinet": ("myrinet", None),
    "AM/TB2": ("tb2", "am"),
}


def _dp_run(nic: str, proto: str | None, iters: int) -> tuple[float, float, int, int, float, int]:
    """(wall s, CPU s, modeled instants, engine events, modeled RTT s, task steps taken
    outside trio's loop) of a modeled ping-pong."""
    if proto == "am":
        from libdp._am_bench import am_pingpong_program
        c = Cluster(nodes=2, nic=nic, load=[("am", {})])
        t, cpu = time.perf_counter(), time.process_time()
        rows = c.run_spmd(am_pingpong_program, (1,), iters)[0]
    else:
        c = Cluster(nodes=2, nic=nic)
        t, cpu = time.perf_counter(), time.process_time()
        rows = c.run_spmd(pingpong, [1], iters, 0)[0]
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    return (wall, cpu, c.engine.events_run + getattr(c.engine, "advances", 0), c.engine.events_run,
            rows[0]["rtt_us"] * 1e-6, c.clock.counter.stepped)


def dp_rate(nic: str, proto: str | None, iters: int, repeat: int) -> dict:
    lo = max(iters // 10, 200)
    best = None
    for _ in range(repeat):
        w_lo, c_lo, i_lo, e_lo, _rtt, s_lo = _dp_run(nic, proto, lo)
        w_hi, c_hi, i_hi, e_hi, rtt, s_hi = _dp_run(nic, proto, iters + lo)
        rate = iters / (w_hi - w_lo)
        if best is None or rate > best["round_trips_per_s"]:
            best = {"round_trips_per_s": rate, "round_trips_per_cpu_s": iters / (c_hi - c_lo),
                    "instants_per_rt": (i_hi - i_lo) / iters,
                    "events_per_rt": (e_hi - e_lo) / iters, "modeled_rtt_us": rtt * 1e6,
                    "steps_outside_trio_per_rt": (s_hi - s_lo) / iters,
                    "wall_us_per_event": (w_hi - w_lo) / (e_hi - e_lo) * 1e6}
    return best


def simpy_rate(events_per_rt: float, rtt_s: float, iters: int, repeat: int) -> tuple[float, float]:
    """Round trips per wall second and per CPU second of the SimPy model with
    `events_per_rt` events each."""
    import simpy

    per_dir = max(1, round(events_per_rt / 2))
    delay = rtt_s / (2 * per_dir)

    def run(n):
        env = simpy.Environment()
        inbox = [env.event(), env.event()]

        def side(rank):
            for i in range(n):
                if rank == 1 or i > 0:
                    yield inbox[rank]
                    inbox[rank] = env.event()
                for _stage in range(per_dir - 1):      # the pipeline's stages, one event each
                    yield env.timeout(delay)
                inbox[1 - rank].succeed()                # the last: wake the peer
            if rank == 0:
                yield inbox[0]

        env.process(side(0))
        env.process(side(1))
        t, cpu = time.perf_counter(), time.process_time()
        env.run()
        return time.perf_counter() - t, time.process_time() - cpu

    return _best_rates(run, iters, repeat)


def _best_rates(run, iters: int, repeat: int) -> tuple[float, float]:
    """The best (wall, CPU) rates of `run(n) -> (wall s, CPU s)`, from the difference of
    a long and a short run (set-up cancels out)."""
    lo = max(iters // 10, 200)
    wall = cpu = 0.0
    for _ in range(repeat):
        w_lo, c_lo = run(lo)
        w_hi, c_hi = run(iters + lo)
        wall = max(wall, iters / (w_hi - w_lo))
        cpu = max(cpu, iters / (c_hi - c_lo))
    return wall, cpu


def paired_rates(nic: str, proto: str | None, iters: int, repeat: int) -> dict:
    """`repeat` pairs of runs, each dp run followed at once by the SimPy model's: the best
    rates of each, and the ratio as the median of the pairs' own ratios. A pair's two runs
    see the same host; the best dp rate over the best SimPy rate may not (on a shared host
    whose speed moved twofold within a minute, that ratio went 3.3x to 7.6x for one build)."""
    pairs = []
    for _ in range(repeat):
        r = dp_rate(nic, proto, iters, 1)
        try:
            simpy = simpy_rate(r["instants_per_rt"], r["modeled_rtt_us"] * 1e-6, iters, 1)
        except ImportError:
            simpy = None
        pairs.append((r, simpy))
    best = max((r for r, _ in pairs), key=lambda r: r["round_trips_per_s"])
    if pairs[0][1] is None:
        best["simpy_round_trips_per_s"] = best["simpy_round_trips_per_cpu_s"] = None
        best["ratio_to_simpy"] = best["cpu_ratio_to_simpy"] = None
        return best
    best["simpy_round_trips_per_s"] = max(w for _, (w, _c) in pairs)
    best["simpy_round_trips_per_cpu_s"] = max(c for _, (_w, c) in pairs)
    best["pair_ratios_to_simpy"] = [r["round_trips_per_s"] / w for r, (w, _c) in pairs]
    best["ratio_to_simpy"] = statistics.median(best["pair_ratios_to_simpy"])
    best["cpu_ratio_to_simpy"] = statistics.median(r["round_trips_per_cpu_s"] / c for r, (_w, c) in pairs)
    return best


def trio_floor_rate(iters: int, repeat: int) -> tuple[float, float]:
    """Round trips per (wall, CPU) second of two bare trio tasks handing the turn back and
    forth: two passes of trio's run loop per round trip, what a modeled ping-pong between
    two programs cost before its waits stepped their peers themselves."""
    import outcome
    import trio
    from trio.lowlevel import Abort, current_task, reschedule, wait_task_rescheduled

    def abort(_):
        return Abort.SUCCEEDED

    def run(n):
        tasks = {}
        spent = []

        async def ping():
            tasks["ping"] = current_task()
            await trio.sleep(0)                 # pong has parked
            t, cpu = time.perf_counter(), time.process_time()
            for _ in range(n):
                reschedule(tasks["pong"])
                await wait_task_rescheduled(abort)
            spent.append((time.perf_counter() - t, time.process_time() - cpu))
            reschedule(tasks["pong"], outcome.Value(None))

        async def pong():
            tasks["pong"] = current_task()
            for _ in range(n + 1):
                await wait_task_rescheduled(abort)
                if len(spent) == 0:
                    reschedule(tasks["ping"])

        async def main():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pong)
                nursery.start_soon(ping)

        trio.run(main)
        return spent[0]

    return _best_rates(run, iters, repeat)


def sweep_seconds(argv: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one ``dp`` command, run in this process."""
    from libdp._cli import main as dp_main

    t, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        rc = dp_main(argv)
    if rc:
        raise SystemExit(f"dp {' '.join(argv)} failed ({rc})")
    return time.perf_counter() - t, time.process_time() - cpu


SWEEPS = {
    "am-bandwidth 1 MB": ["am-bandwidth", "--json"],
    "bandwidth myrinet adaptive": ["bandwidth", "--nic", "myrinet", "--pipeline", "adaptive", "--json"],
}


def engine_us_per_event(n: int = 200000) -> float:
    """Wall microseconds per engine event for a self-rescheduling Python callback: the floor
    any modeled event pays (bench_modeled.py and bench_fabric.py measure against it too)."""
    eng = Engine()
    left = [n]

    def tick(_):
        left[0] -= 1
        if left[0]:
            eng.after(1e-6, tick, None)

    eng.after(0.0, tick, None)
    t = time.perf_counter()
    eng.run()
    return (time.perf_counter() - t) / n * 1e6


def heapq_us_per_event(n: int = 200000) -> float:
    """The same self-rescheduling callback on a bare heapq loop (time, seq, fn, arg)."""
    heap = []
    now = [0.0]
    seq = [0]
    left = [n]

    def tick(_):
        left[0] -= 1
        if left[0]:
            seq[0] += 1
            heapq.heappush(heap, (now[0] + 1e-6, seq[0], tick, None))

    heapq.heappush(heap, (0.0, 0, tick, None))
    t = time.perf_counter()
    while heap:
        now[0], _s, fn, arg = heapq.heappop(heap)
        fn(arg)
    return (time.perf_counter() - t) / n * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=20000, help="round trips timed (beyond the short run)")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many (the ratio: median of this many pairs)")
    ap.add_argument("--only", choices=sorted(SYSTEMS), action="append", help="just these systems")
    ap.add_argument("--sweeps", action="store_true", help="also time the two sweeps of issue 8")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out = {"iters": args.iters, "systems": {}}
    for name in args.only or SYSTEMS:
        nic, proto = SYSTEMS[name]
        out["systems"][name] = paired_rates(nic, proto, args.iters, args.repeat)
    out["trio_floor_round_trips_per_s"], out["trio_floor_round_trips_per_cpu_s"] = trio_floor_rate(
        args.iters, args.repeat)
    out["engine_us_per_event"] = min(engine_us_per_event() for _ in range(args.repeat))
    out["heapq_us_per_event"] = min(heapq_us_per_event() for _ in range(args.repeat))
    if args.sweeps:
        out["sweeps"] = {}
        for name, argv in SWEEPS.items():
            wall, cpu = sweep_seconds(argv)
            out["sweeps"][name] = {"wall_s": wall, "cpu_s": cpu}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"# modeled 1-byte ping-pong, {args.iters} round trips timed, best of {args.repeat}; "
          f"rates per wall second (per CPU second of this process); ratio: the median of "
          f"{args.repeat} pairs, each dp run followed by a SimPy run")
    print(f"# {'system':<12}{'RT/s':>18}{'SimPy RT/s':>18}{'ratio':>13}{'events/RT':>11}{'instants/RT':>13}"
          f"{'us/event':>10}{'steps/RT':>10}")
    for name, r in out["systems"].items():
        rates = f"{r['round_trips_per_s']:9.0f} ({r['round_trips_per_cpu_s']:6.0f})"
        if r["ratio_to_simpy"]:
            simpy_s = f"{r['simpy_round_trips_per_s']:9.0f} ({r['simpy_round_trips_per_cpu_s']:6.0f})"
            ratio = f"{r['ratio_to_simpy']:6.2f} ({r['cpu_ratio_to_simpy']:4.2f})"
        else:
            simpy_s, ratio = f"{'(no simpy)':>18}", f"{'-':>13}"
        print(f"  {name:<12}{rates:>18}{simpy_s:>18}{ratio:>13}{r['events_per_rt']:11.1f}"
              f"{r['instants_per_rt']:13.1f}{r['wall_us_per_event']:10.2f}{r['steps_outside_trio_per_rt']:10.2f}")
    print(f"# trio's loop alone (two bare tasks, two passes per round trip; no longer paid by a ping-pong): "
          f"{out['trio_floor_round_trips_per_s']:.0f} ({out['trio_floor_round_trips_per_cpu_s']:.0f}) RT/s")
    print(f"# bare event: dp engine {out['engine_us_per_event']:.3f} us, heapq loop {out['heapq_us_per_event']:.3f} us")
    for name, t in out.get("sweeps", {}).items():
        print(f"# sweep dp {name}: {t['wall_s']:.2f} s wall, {t['cpu_s']:.2f} s CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
