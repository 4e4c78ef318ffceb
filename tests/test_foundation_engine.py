"""The event engine, the preemptive CPU, the trio EngineClock and deadlock detection.

Times in the Engine/Cpu tests are small whole numbers of seconds so that every sum
is exact in binary floating point and "exactly" can be asserted with ``==``.
"""
from __future__ import annotations

import errno
import math

import pytest
import trio
from hypothesis import given, settings, strategies as st

from kernelsim import LEVEL_IRQ, LEVEL_PROC, Cpu, Engine
from libdp import Cluster


def _leaves(exc):
    """Every non-group exception inside `exc` (trio wraps errors in ExceptionGroups)."""
    if isinstance(exc, BaseExceptionGroup):
        for e in exc.exceptions:
            yield from _leaves(e)
    else:
        yield exc


# --------------------------------------------------------------------------- Engine


def test_engine_orders_by_time_then_priority_then_sequence():
    e = Engine()
    log = []
    e.at(2.0, log.append, "t2")
    e.at(1.0, log.append, "t1-p1-first", prio=1)
    e.at(1.0, log.append, "t1-p0", prio=0)
    e.at(1.0, log.append, "t1-p1-second", prio=1)
    e.at(1.0, log.append, "t1-pneg", prio=-5)
    e.at(0.5, log.append, "t0.5-p9", prio=9)
    assert e.run() == 6
    assert log == ["t0.5-p9", "t1-pneg", "t1-p0", "t1-p1-first", "t1-p1-second", "t2"]
    assert e.now == 2.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(-3, 3), st.booleans()), max_size=600))
def test_engine_order_property(events):
    """Any schedule (beyond the initial 256 slots too) runs in (time, prio, seq) order;
    cancelled events never run."""
    e = Engine()
    log = []
    handles = []
    for i, (t, prio, _cancel) in enumerate(events):
        handles.append(e.at(float(t), log.append, i, prio=prio))
    for i, (_t, _p, cancel) in enumerate(events):
        if cancel:
            assert e.cancel(handles[i]) is True
    live = [i for i, (_t, _p, c) in enumerate(events) if not c]
    assert len(e) == len(live)
    expected = sorted(live, key=lambda i: (events[i][0], events[i][1], i))
    assert e.run() == len(live)
    assert log == expected
    assert len(e) == 0
    assert e.peek() == math.inf


def test_event_scheduled_during_run_takes_its_place_in_order():
    e = Engine()
    log = []

    def first(_):
        log.append("A")
        e.at(1.0, log.append, "X-urgent", prio=-1)     # same time, more urgent than B
        e.at(1.0, log.append, "Y-same-prio", prio=0)   # same time and prio: after B (later seq)

    e.at(1.0, first, None, prio=0)
    e.at(1.0, log.append, "B", prio=0)
    e.run()
    assert log == ["A", "X-urgent", "B", "Y-same-prio"]


def test_engine_at_in_the_past_runs_now_not_earlier():
    e = Engine()
    e.run(until=5.0)
    assert e.now == 5.0
    seen = []
    e.at(1.0, lambda _: seen.append(e.now))
    e.after(0.0, lambda _: seen.append(e.now))
    e.run()
    assert seen == [5.0, 5.0]
    assert e.now == 5.0


def test_cancel_once_and_not_after_run():
    e = Engine()
    log = []
    h = e.after(1.0, log.append, "cancelled")
    h2 = e.after(2.0, log.append, "ran")
    assert e.cancel(h) is True
    assert e.cancel(h) is False          # already cancelled
    e.run()
    assert log == ["ran"]
    assert e.cancel(h2) is False         # already ran


def test_cancel_of_a_handle_that_was_never_issued_is_false():
    """`cancel` checks the slot range itself (slot < 0 or beyond the table): a bogus
    handle such as the -1 "no event" sentinel answers False rather than raising."""
    e = Engine()
    e.after(1.0, lambda _: None)
    assert e.cancel(1 << 40) is False     # slot 0 with a generation never issued
    assert e.cancel(-1) is False
    assert e.cancel(0xFFFFFFFF) is False
    assert len(e) == 1


def test_stale_handle_cannot_cancel_an_event_reusing_its_slot():
    e = Engine()
    log = []
    old = e.after(1.0, log.append, "old")
    e.run()
    assert log == ["old"]
    # The freed slot is handed out again (lowest free slot first).
    new = e.after(1.0, log.append, "new")
    assert new & 0xFFFFFFFF == old & 0xFFFFFFFF, "test premise: the slot is reused"
    assert new != old
    assert e.cancel(old) is False
    e.run()
    assert log == ["old", "new"]

    # Same after a cancellation: the cancelled handle cannot kill the slot's next user.
    c = e.after(1.0, log.append, "cancelled")
    assert e.cancel(c)
    e.run()                               # pops the dead key, frees the slot
    reuse = e.after(1.0, log.append, "reuse")
    assert reuse & 0xFFFFFFFF == c & 0xFFFFFFFF
    assert e.cancel(c) is False
    e.run()
    assert log == ["old", "new", "reuse"]


def test_run_until_is_inclusive_and_moves_time_to_until():
    e = Engine()
    log = []
    for t in (1.0, 2.0, 3.0, 4.0):
        e.at(t, log.append, t)
    assert e.run(until=2.0) == 2
    assert log == [1.0, 2.0]
    assert e.now == 2.0
    assert e.run(until=3.5) == 1
    assert e.now == 3.5                   # time moves to `until` even between events
    assert e.peek() == 4.0
    assert e.run(until=1.0) == 0          # never backwards
    assert e.now == 3.5
    assert len(e) == 1
    assert e.run() == 1
    assert log == [1.0, 2.0, 3.0, 4.0]
    assert e.now == 4.0
    st_ = e.stats()
    assert st_["events_run"] == 4 and st_["pending"] == 0


def test_run_until_stop_returns_after_the_stopping_event():
    e = Engine()
    log = []

    def stopper(tag):
        log.append(tag)
        e.request_stop()

    e.at(1.0, log.append, "a")
    e.at(2.0, stopper, "stop")
    e.at(3.0, log.append, "c")
    assert e.run_until_stop(10.0) == 2
    assert log == ["a", "stop"]
    assert e.now == 2.0
    assert e.stop_requested
    # The next call starts afresh and runs on to the limit.
    assert e.run_until_stop(2.5) == 0
    assert e.now == 2.0                   # run_until_stop does not advance time by itself
    assert e.run_until_stop(math.inf) == 1
    assert log == ["a", "stop", "c"]
    assert not e.stop_requested


# --------------------------------------------------------------------------- Cpu


def _path(cost_list, value=None, log=None, tag=None):
    for c in cost_list:
        yield c
    if log is not None:
        log.append(tag)
    return value


class _Done:
    def __init__(self, engine):
        self.engine = engine
        self.at = {}
        self.values = {}
        self.excs = {}

    def cb(self, name):
        def on_done(value, exc):
            self.at[name] = self.engine.now
            self.values[name] = value
            self.excs[name] = exc
        return on_done


def test_process_path_takes_the_sum_of_its_costs():
    e = Engine()
    cpu = Cpu(e, True)
    d = _Done(e)
    cpu.submit(LEVEL_PROC, _path([1.0, 2.0, 0.0, 4.0], value="v"), d.cb("p"))
    e.run()
    assert d.at["p"] == 7.0
    assert d.values["p"] == "v" and d.excs["p"] is None


def test_irq_path_preempts_process_path_by_exactly_its_time():
    e = Engine()
    cpu = Cpu(e, True)
    d = _Done(e)
    cpu.submit(LEVEL_PROC, _path([10.0], value="p"), d.cb("p"))
    e.run(until=4.0)
    assert "p" not in d.at
    cpu.submit(LEVEL_IRQ, _path([1.0, 2.0], value="i"), d.cb("i"))
    e.run()
    assert d.at["i"] == 4.0 + 3.0         # the interrupt runs at once
    assert d.at["p"] == 10.0 + 3.0        # pushed back by exactly the interrupt's time
    assert d.values == {"p": "p", "i": "i"}
    s = cpu.stats()
    assert s["preemptions"] == 1
    assert s["busy_proc_us"] == pytest.approx(10.0e6)
    assert s["busy_irq_us"] == pytest.approx(3.0e6)
    assert s["paths_irq"] == 1 and s["paths_proc"] == 1


def test_unpreempted_reference_for_the_same_process_path():
    e = Engine()
    cpu = Cpu(e, True)
    d = _Done(e)
    cpu.submit(LEVEL_PROC, _path([10.0]), d.cb("p"))
    e.run()
    assert d.at["p"] == 10.0
    assert cpu.stats()["preemptions"] == 0


def test_two_interrupts_delay_the_process_by_their_sum_and_do_not_preempt_each_other():
    e = Engine()
    cpu = Cpu(e, True)
    d = _Done(e)
    cpu.submit(LEVEL_PROC, _path([4.0, 6.0]), d.cb("p"))        # two segments
    e.at(2.0, lambda _: cpu.submit(LEVEL_IRQ, _path([3.0]), d.cb("a")))
    e.at(3.0, lambda _: cpu.submit(LEVEL_IRQ, _path([4.0]), d.cb("b")))   # while `a` runs
    e.at(14.0, lambda _: cpu.submit(LEVEL_IRQ, _path([1.0]), d.cb("c")))  # in the 2nd segment
    e.run()
    assert d.at["a"] == 5.0
    assert d.at["b"] == 9.0               # FIFO after `a`, not preempting it
    assert d.at["c"] == 15.0
    assert d.at["p"] == 10.0 + 3.0 + 4.0 + 1.0
    assert cpu.stats()["preemptions"] == 2


def test_process_paths_run_fifo_one_at_a_time():
    e = Engine()
    cpu = Cpu(e, True)
    d = _Done(e)
    for name, cost in (("p1", 3.0), ("p2", 1.0), ("p3", 2.0)):
        cpu.submit(LEVEL_PROC, _path([cost]), d.cb(name))
    e.run()
    assert d.at == {"p1": 3.0, "p2": 4.0, "p3": 6.0}


def test_interrupt_raised_inside_process_code_runs_before_its_next_segment():
    e = Engine()
    cpu = Cpu(e, True)
    d = _Done(e)

    def proc():
        yield 1.0
        # A device raises its line during the system call (no time spent yet here).
        cpu.submit(LEVEL_IRQ, _path([2.0]), d.cb("irq"))
        yield 5.0
        return "p"

    cpu.submit(LEVEL_PROC, proc(), d.cb("p"))
    e.run()
    assert d.at["irq"] == 3.0
    assert d.at["p"] == 8.0


def test_path_exception_is_passed_to_on_done_and_cpu_goes_on():
    e = Engine()
    cpu = Cpu(e, True)
    d = _Done(e)

    def bad():
        yield 1.0
        raise OSError(errno.EIO, "boom")

    cpu.submit(LEVEL_PROC, bad(), d.cb("bad"))
    cpu.submit(LEVEL_PROC, _path([2.0], value=7), d.cb("next"))
    e.run()
    assert d.values["bad"] is None
    assert isinstance(d.excs["bad"], OSError) and d.excs["bad"].errno == errno.EIO
    assert d.at["bad"] == 1.0
    assert d.at["next"] == 3.0 and d.values["next"] == 7


def test_real_time_cpu_runs_paths_straight_through_in_order():
    e = Engine(realtime=True)
    cpu = Cpu(e, False)
    assert not cpu.modeled
    order = []
    d = _Done(e)

    def outer():
        yield 1000.0                      # ignored in real time
        cpu.submit(LEVEL_IRQ, _path([5.0], log=order, tag="inner"), d.cb("inner"))
        order.append("outer-after-submit")
        return "outer"

    cpu.submit(LEVEL_PROC, outer(), d.cb("outer"))
    # Both done synchronously inside submit; the nested one waited for the outer.
    assert order == ["outer-after-submit", "inner"]
    assert d.values == {"outer": "outer", "inner": None}


# --------------------------------------------------------------------------- EngineClock


def test_trio_sleep_advances_modeled_time_by_exactly_the_duration():
    c = Cluster(nodes=2)
    dp = c.process(0)

    async def main():
        t0 = trio.current_time()
        assert t0 == dp.now() == c.engine.now
        await trio.sleep(0.5)
        t1 = trio.current_time()
        await trio.sleep(0.25)
        return t0, t1, trio.current_time()

    t0, t1, t2 = c.run(main)
    assert t1 - t0 == 0.5
    assert t2 - t1 == 0.25
    assert c.engine.now == t2


def test_sleep_lets_the_model_run_meanwhile_and_ends_on_time():
    c = Cluster(nodes=2)
    a, b = c.process(0), c.process(1)

    async def main():
        fa = await a.dp_open(1)
        await a.dp_target(fa, 1, 2)
        fb = await b.dp_open(2)
        await a.dp_write(fa, b"in flight")
        t0 = trio.current_time()
        await trio.sleep(0.5)             # the frame crosses the wire meanwhile
        assert trio.current_time() == t0 + 0.5
        b.set_blocking(fb, False)
        return await b.dp_read(fb, 100)   # already there: no waiting

    assert c.run(main) == b"in flight"


def test_move_on_after_fires_at_the_modeled_deadline_instead_of_deadlock():
    c = Cluster(nodes=2)
    b = c.process(1)

    async def main():
        fb = await b.dp_open(9)
        t0 = trio.current_time()
        with trio.move_on_after(0.01) as scope:
            await b.dp_read(fb, 10)       # nobody writes
        return scope.cancelled_caught, trio.current_time() - t0

    cancelled, waited = c.run(main)
    assert cancelled
    assert waited == pytest.approx(0.01, abs=1e-12)


@pytest.mark.trio
async def test_pytest_trio_runs_on_the_engine_clock(modeled, model_clock):
    assert trio.current_time() == modeled.engine.now == 0.0
    await trio.sleep(0.125)
    assert trio.current_time() == modeled.engine.now == 0.125


# --------------------------------------------------------------------------- deadlock


async def _read_nobody_writes(dp):
    fd = await dp.dp_open(77)
    return await dp.dp_read(fd, 10)


def test_deadlock_in_cluster_run_is_detected_as_edeadlk():
    """The run does not hang: somewhere in what it raises is OSError(EDEADLK)."""
    c = Cluster(nodes=2)
    with pytest.raises(BaseException) as ei:
        c.run(_read_nobody_writes, c.process(1))
    codes = [getattr(x, "errno", None) for x in _leaves(ei.value)]
    assert errno.EDEADLK in codes


def test_deadlock_in_cluster_run_raises_oserror_edeadlk():
    """`Cluster.run` reports a modeled deadlock as OSError(EDEADLK), catchable as such."""
    c = Cluster(nodes=2)
    with pytest.raises(OSError) as ei:
        c.run(_read_nobody_writes, c.process(1))
    assert ei.value.errno == errno.EDEADLK


def test_deadlock_of_a_sync_read_raises_edeadlk():
    c = Cluster(nodes=2)
    b = c.process(1)
    fd = b.sync.dp_open(77)
    with pytest.raises(OSError) as ei:
        b.sync.dp_read(fd, 10)
    assert ei.value.errno == errno.EDEADLK
    with pytest.raises(OSError) as ei:
        b.sync.read(fd, 10)
    assert ei.value.errno == errno.EDEADLK
    with pytest.raises(OSError) as ei:
        b.sync.dp_read_token(fd)
    assert ei.value.errno == errno.EDEADLK


def test_sync_read_waits_for_a_message_in_flight_without_deadlock():
    c = Cluster(nodes=2)
    a, b = c.process(0), c.process(1)
    fa = a.sync.dp_open(1)
    a.sync.dp_target(fa, 1, 2)
    fb = b.sync.dp_open(2)
    a.sync.dp_write(fa, b"late")          # returns before the frame leaves the NIC
    t0 = c.engine.now
    assert b.sync.dp_read(fb, 10) == b"late"
    assert c.engine.now > t0              # the read drove modeled time forward
