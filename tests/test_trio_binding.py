"""The binding of modeled calls to trio: parks, wakes, cancellation, where errors surface.

`kernelsim._trio` parks and wakes tasks through C replicas of trio's `reschedule` and
`wait_task_rescheduled` when this trio's sources match them, else through trio's public
calls. Both must give the same modeled results and the same behaviour; these tests run
both ways.
"""
from __future__ import annotations

import errno
import time

import pytest
import trio
import trio.testing

from kernelsim import RunnableCounter, checkpoint, replicates_trio, sleep_until_readable
from libdp import Cluster, pingpong


@pytest.fixture(params=[True, False], ids=["replicas", "public-calls"])
def binding(request):
    before = replicates_trio()
    replicates_trio(request.param)
    yield request.param
    replicates_trio(before)


def test_both_bindings_give_the_same_modeled_round_trips():
    runs = {}
    for on in (True, False):
        before = replicates_trio()
        replicates_trio(on)
        try:
            runs[on] = Cluster(nodes=2).run_spmd(pingpong, [1, 200], 40, 2)[0]
        finally:
            replicates_trio(before)
    assert runs[True] == runs[False]
    assert [r["size"] for r in runs[True]] == [1, 200]
    assert runs[True][0]["rtt_us"] < runs[True][1]["rtt_us"]


async def _sender_and_receiver(c):
    """Process a on node 0 targeted at endpoint 2 of node 1, which process b opened."""
    a, b = c.process(0), c.process(1)
    fa = await a.dp_open(1)
    await a.dp_target(fa, 1, 2)
    fb = await b.dp_open(2)
    return a, fa, b, fb


def test_a_cancelled_read_leaves_nothing_behind(binding):
    """A read parked on an empty pool, cancelled by a modeled timeout, takes no message
    that comes later: the next read gets it, and the pool's wait queue is empty."""
    c = Cluster(nodes=2)

    async def main():
        a, fa, b, fb = await _sender_and_receiver(c)
        with trio.move_on_after(1e-3) as scope:
            await b.dp_read(fb, 100)
        assert scope.cancelled_caught
        assert len(b._endpoint(fb).readers) == 0
        await a.dp_write(fa, b"after the timeout")
        return await b.dp_read(fb, 100)

    assert c.run(main) == b"after the timeout"


def test_a_misused_call_raises_where_it_is_awaited(binding):
    c = Cluster(nodes=2)

    async def main():
        a = c.process(0)
        pending = a.dp_read(987654, 10)          # nothing raised yet: an awaitable
        with pytest.raises(OSError) as ei:
            await pending
        assert ei.value.errno == errno.EBADF
        fd = await a.dp_open(1)
        with pytest.raises(OSError) as ei:
            await a.dp_write(fd, "not bytes")
        assert ei.value.errno == errno.EFAULT

    c.run(main)


def test_a_read_looks_at_the_pool_when_it_runs_not_when_it_is_made(binding):
    """A read made while the pool is empty and awaited after a message came returns that
    message (it does not wait for a second one)."""
    c = Cluster(nodes=2)

    async def main():
        a, fa, b, fb = await _sender_and_receiver(c)
        pending = b.dp_read(fb, 100)
        await a.dp_write(fa, b"first")
        await trio.sleep(1e-3)                    # modeled: the frame has landed
        with trio.fail_after(1.0):
            return await pending

    assert c.run(main) == b"first"


def test_a_call_sees_its_node_s_tables_as_they_are_when_it_runs():
    """The gate's routine and the dp service are found again after each edit of their
    tables between calls (the calls keep what they found while a table is unchanged)."""
    c = Cluster(nodes=2)

    async def main():
        a, fa, b, fb = await _sender_and_receiver(c)
        node_a, node_b = c.node(0), c.node(1)
        for _ in range(3):                          # found, then kept
            await a.dp_write(fa, b"m")
            assert await b.dp_read(fb, 10) == b"m"
        gate = node_a.callgates.pop("dp_write")
        with pytest.raises(OSError) as ei:
            await a.dp_write(fa, b"m")
        assert ei.value.errno == errno.ENOSYS
        node_a.callgates["dp_write"] = gate
        await a.dp_write(fa, b"back")
        dp = node_b.services.pop("dp")
        with pytest.raises(OSError) as ei:
            await b.dp_read(fb, 10)
        assert ei.value.errno == errno.EINVAL
        node_b.services["dp"] = dp
        return await b.dp_read(fb, 10)

    assert c.run(main) == b"back"


def test_two_nodes_calling_in_turn_each_see_their_own_gate_table():
    """The kept routines are one per table (two kept): a ping-pong's nodes call in turn,
    and an edit of one node's gates reaches that node's next call only."""
    c = Cluster(nodes=2)

    async def main():
        a, fa, b, fb = await _sender_and_receiver(c)
        await b.dp_target(fb, 0, 1)
        node_b = c.node(1)
        for _ in range(3):                          # both found, then both kept
            await a.dp_write(fa, b"ab")
            assert await b.dp_read(fb, 10) == b"ab"
            await b.dp_write(fb, b"ba")
            assert await a.dp_read(fa, 10) == b"ba"
        gate = node_b.callgates.pop("dp_write")
        await a.dp_write(fa, b"still")
        with pytest.raises(OSError) as ei:
            await b.dp_write(fb, b"m")
        assert ei.value.errno == errno.ENOSYS
        node_b.callgates["dp_write"] = gate
        await b.dp_write(fb, b"back")
        return await b.dp_read(fb, 10), await a.dp_read(fa, 10)

    assert c.run(main) == (b"still", b"back")


# -- Handing the turn over (kernelsim._trio): a modeled wait steps the task it woke -------

def _both_ways(run):
    """``run()`` with the replicas (a wait may step the task it woke) and with trio's public
    calls and its own loop only; returns (with, without)."""
    out = []
    for on in (True, False):
        before = replicates_trio()
        replicates_trio(on)
        try:
            out.append(run())
        finally:
            replicates_trio(before)
    return out


def test_a_ping_pong_runs_without_trio_passes_and_nothing_modeled_moves():
    """Each round trip, the waiting rank steps its peer itself; the modeled figures are
    those trio's own loop gives, on every NIC."""
    def run(nic):
        c = Cluster(nodes=2, nic=nic)
        rows = c.run_spmd(pingpong, [1, 200], 30, 2)[0]
        return rows, c.clock.counter.stepped

    for nic in ("dec21140", "myrinet", "atm", "tb2"):
        (fast, stepped), (slow, none) = _both_ways(lambda: run(nic))
        assert fast == slow, nic
        assert none == 0
        assert stepped >= 2 * 32, (nic, stepped)        # one step per round trip at least


class _StepWatcher:
    """An instrument that trio calls before every task step."""

    def __init__(self):
        self.steps = 0

    def before_task_step(self, task):
        self.steps += 1


class _IoWatcher:
    """An instrument with no hook on a task's step or scheduling."""

    def before_io_wait(self, timeout):
        pass


@pytest.mark.parametrize("extra", [_StepWatcher, _IoWatcher], ids=["step-hook", "io-hook"])
def test_another_instrument_s_step_hook_stops_the_hand_over(extra):
    """A wait steps the task it woke only while no instrument but the counter is called on a
    step: another with a step hook sees every step trio's way (and the modeled figures do
    not move); one with other hooks only leaves the hand-over on."""
    def run(nic, with_extra):
        c = Cluster(nodes=2, nic=nic)
        watcher = extra()

        async def program(dp, rank, size):
            if with_extra and rank == 0:
                trio.lowlevel.add_instrument(watcher)
            return await pingpong(dp, rank, size, [1], 30, 2)

        rows = c.run_spmd(program)[0]
        return rows, c.clock.counter.stepped, watcher

    plain, _, _ = run("dec21140", False)
    rows, stepped, watcher = run("dec21140", True)
    assert rows == plain
    if extra is _StepWatcher:
        assert stepped < 4 and watcher.steps >= 2 * 32
    else:
        assert stepped >= 32            # one step per round trip at least (trio's batch order varies the rest)


async def _timeline(c, marks, watch_fd):
    """Rank 0 and 1 ping-pong 20 times; a third task on node 1 waits on a descriptor
    (`watch_fd`: True) or on a modeled timeout and records when it woke."""
    a, fa, b, fb = await _sender_and_receiver(c)
    fb_back = await b.dp_open(3)
    await b.dp_target(fb_back, 0, 4)
    fa_in = await a.dp_open(4)
    w = c.process(1, "watcher")
    fw = await w.dp_open(9)
    fa_w = await a.dp_open(8)
    await a.dp_target(fa_w, 1, 9)

    async def ping():
        for i in range(20):
            await a.dp_write(fa, b"x" * (i + 1))
            if i == 7:
                await a.dp_write(fa_w, b"for the watcher")
            await a.dp_read(fa_in, 100)
            marks.append(("a", i, trio.current_time()))

    async def pong():
        for i in range(20):
            got = await b.dp_read(fb, 100)
            await b.dp_write(fb_back, got)
            marks.append(("b", i, trio.current_time()))

    async def watcher():
        if watch_fd:
            await trio.lowlevel.wait_readable(fw)
        else:
            await trio.sleep(150e-6)
        marks.append(("w", 0, trio.current_time()))
        if watch_fd:
            marks.append(("w", 1, await w.dp_read(fw, 100)))

    async with trio.open_nursery() as n:
        n.start_soon(ping)
        n.start_soon(pong)
        n.start_soon(watcher)


@pytest.mark.parametrize("watch_fd", [True, False], ids=["fd", "timeout"])
def test_a_task_waiting_on_an_fd_or_a_deadline_wakes_at_the_same_modeled_instant(watch_fd):
    """A task waiting on a descriptor (which only trio's loop polls) or on a deadline is
    woken when trio would wake it, whichever way the round trips run."""
    def run():
        c = Cluster(nodes=2)
        marks = []
        c.run(_timeline, c, marks, watch_fd)
        return sorted(marks, key=lambda m: (m[0], m[1])), c.clock.counter.stepped

    (fast, stepped), (slow, _) = _both_ways(run)
    assert fast == slow
    assert ("w", 0) in {(m[0], m[1]) for m in fast}
    assert stepped > 0


def test_a_stepped_task_that_raises_fails_the_run_as_it_would_under_trio():
    """The peer a wait steps raises (a misuse) inside that step: trio finishes the step,
    and the error comes out of the run with its errno."""
    def run():
        c = Cluster(nodes=2)

        async def main():
            a, fa, b, fb = await _sender_and_receiver(c)
            fb_back = await b.dp_open(3)
            await b.dp_target(fb_back, 0, 4)
            fa_in = await a.dp_open(4)

            async def ping():
                await a.dp_write(fa, b"ping")
                await a.dp_read(fa_in, 100)         # never answered: the peer fails first

            async def pong():
                await b.dp_read(fb, 100)
                await b.dp_write(987, b"no such fd")

            async with trio.open_nursery() as n:
                n.start_soon(ping)
                n.start_soon(pong)

        with pytest.raises(OSError) as ei:
            c.run(main)
        return ei.value.errno, c.engine.now, c.clock.counter.stepped

    (err, t, stepped), (err_slow, t_slow, _) = _both_ways(run)
    assert err == err_slow == errno.EBADF
    assert t == t_slow
    assert stepped >= 1


def test_a_wait_cancelled_by_the_task_it_steps_ends_at_that_modeled_instant():
    """A rank parked on a read is cancelled by its peer while the peer runs inside that
    read's wait: the read ends in Cancelled at the instant of the cancel, the peer does
    not run on past it, and the message that comes later is not lost."""
    def run():
        c = Cluster(nodes=2)
        marks = {}

        async def main():
            a, fa, b, fb = await _sender_and_receiver(c)
            fb_back = await b.dp_open(3)
            await b.dp_target(fb_back, 0, 4)
            fa_in = await a.dp_open(4)
            scopes = {}

            async def ping():
                await a.dp_write(fa, b"ping")
                with trio.CancelScope() as scopes["a"]:
                    await a.dp_read(fa_in, 100)
                marks["a_cancelled"] = (scopes["a"].cancelled_caught, trio.current_time())
                marks["a_late"] = await a.dp_read(fa_in, 100)

            async def pong():
                await b.dp_read(fb, 100)
                scopes["a"].cancel()
                marks["b_cancelled_at"] = trio.current_time()
                await b.dp_write(fb_back, b"late answer")
                marks["b_wrote_at"] = trio.current_time()

            async with trio.open_nursery() as n:
                n.start_soon(ping)
                n.start_soon(pong)

        c.run(main)
        return marks, c.clock.counter.stepped

    (fast, stepped), (slow, _) = _both_ways(run)
    assert fast == slow
    assert fast["a_cancelled"] == (True, fast["b_cancelled_at"])
    assert fast["a_late"] == b"late answer"
    assert stepped >= 1


# -- Checkpoints that find nothing to do (kernelsim.checkpoint) --------------------------

class _Passes:
    """Counts passes of trio's run loop (each one waits for I/O, if only for 0 s)."""

    def __init__(self):
        self.n = 0

    def before_io_wait(self, timeout):
        self.n += 1


def _run_counted(main, counter=True):
    passes = _Passes()
    instruments = [RunnableCounter(), passes] if counter else [passes]
    return trio.run(main, instruments=instruments), passes.n


@pytest.mark.parametrize("counter", [True, False], ids=["counted-run", "counter-joins"])
def test_a_lone_task_s_checkpoints_make_no_pass_of_trio_s_loop(binding, counter):
    """With nothing else to run, 1000 checkpoints cost no pass of the loop (with the
    replicas), whether the run was started with a counter or one joined it at the first
    call (a script's own ``trio.run``); with trio's own calls, one pass each."""
    async def main():
        for _ in range(1000):
            with trio.testing.assert_checkpoints():     # counted as trio counts them
                await checkpoint()

    _, passes = _run_counted(main, counter)
    assert (passes < 10) if binding else (passes >= 1000)


@pytest.mark.parametrize("counter", [True, False], ids=["counted-run", "counter-joins"])
def test_a_checkpoint_still_lets_every_other_task_run(binding, counter):
    """Another runnable task makes each checkpoint a full one: a loop of them starves no
    one -- also where the counter joined the run half-way through a batch."""
    async def main():
        turns = {"other": 0, "done": False}

        async def other():
            while not turns["done"]:
                turns["other"] += 1
                await trio.sleep(0)

        async with trio.open_nursery() as n:
            n.start_soon(other)
            await trio.sleep(0)
            for _ in range(1000):
                await checkpoint()
            turns["done"] = True
        return turns["other"]

    other_turns, _ = _run_counted(main, counter)
    assert other_turns >= 1000


def test_a_checkpoint_is_a_cancel_point_and_sees_deadlines_and_descriptors(binding):
    """A cancelled scope raises at the next checkpoint; a deadline ends a loop of them; a
    task waiting on a descriptor is woken while another loops on checkpoints."""
    import socket

    async def main():
        with trio.CancelScope() as scope:
            scope.cancel()
            await checkpoint()
        assert scope.cancelled_caught
        with trio.move_on_after(0.01) as timed:
            for _ in range(10 ** 6):            # bounded: a checkpoint blind to deadlines fails, not hangs
                await checkpoint()
        assert timed.cancelled_caught
        a, b = socket.socketpair()
        woke = []

        async def reader():
            await trio.lowlevel.wait_readable(b)
            woke.append(True)

        async with trio.open_nursery() as n:
            n.start_soon(reader)
            await trio.sleep(0)
            a.send(b"x")
            for _ in range(1000):
                if woke:
                    break
                await checkpoint()
            woken_while_looping = list(woke)
        a.close()
        b.close()
        return woken_while_looping

    assert _run_counted(main)[0] == [True]


def test_sleep_until_readable_sleeps_where_trio_would_and_wakes_for_what_trio_would():
    """Nothing else to run: it sleeps in one poll(2) -- no pass of trio's loop -- and says
    True once the descriptor is readable; False, without sleeping or soon after, where
    trio has work: another runnable task, a deadline due, a job from another thread."""
    import socket
    import threading

    async def main():
        a, b = socket.socketpair()
        out = {}
        token = trio.lowlevel.current_trio_token()
        await checkpoint()                          # the counter joins here and counts from the next pass

        def send_later():
            time.sleep(0.02)
            a.send(b"x")
        threading.Thread(target=send_later).start()
        before = passes.n
        out["readable"] = sleep_until_readable(b.fileno())
        out["passes_while_asleep"] = passes.n - before
        b.recv(1)

        async def other():
            pass
        async with trio.open_nursery() as n:
            n.start_soon(other)                     # runnable: trio has work
            out["with_other_task"] = sleep_until_readable(b.fileno())

        with trio.move_on_after(0.01):              # due within the sleep: it ends for trio
            out["deadline"] = sleep_until_readable(b.fileno())
            await trio.sleep_forever()

        sent = []

        def job_later():
            time.sleep(0.02)
            sent.append(True)
            trio.from_thread.run_sync(lambda: None, trio_token=token)
        t = threading.Thread(target=job_later)
        t.start()
        out["thread_job"] = (sleep_until_readable(b.fileno()), bool(sent))    # it slept until the job came
        while t.is_alive():
            await trio.sleep(0.001)                 # trio runs the job, the thread ends

        # A cancellation already pending: trio's park would deliver it at once, so this
        # does not sleep. (Were it to sleep, the thread's byte would end it: True.)
        threading.Timer(0.2, a.send, (b"y",)).start()
        with trio.CancelScope() as scope:
            scope.cancel()
            out["cancel_pending"] = sleep_until_readable(b.fileno())
        await trio.lowlevel.wait_readable(b)
        b.recv(1)

        # Having slept until readable is the caller's checkpoint, counted as trio counts a park.
        a.send(b"z")
        with trio.testing.assert_checkpoints():
            out["counted"] = sleep_until_readable(b.fileno())
        a.close()
        b.close()
        return out

    passes = _Passes()
    out = trio.run(main, instruments=[passes])
    assert out == {"readable": True, "passes_while_asleep": 0, "with_other_task": False,
                   "deadline": False, "thread_job": (False, True), "cancel_pending": False, "counted": True}


def test_a_call_s_value_and_error_are_not_kept_once_it_has_returned(binding):
    # Completions are pooled (kernelsim._trio): one back in the pool must not keep the last
    # call's value or error alive.
    import gc
    import weakref

    from kernelsim import run_path

    class Value:
        pass

    class Failure(OSError):
        pass

    def returns():
        yield 1e-6
        return Value()

    def raises():
        yield 1e-6
        raise Failure(errno.EIO, "path failed")

    async def program(dp, rank, size):
        if rank:
            return None
        node = dp._node
        value = await run_path(node, returns())
        kept = [weakref.ref(value)]
        del value
        try:
            await run_path(node, raises())
        except Failure as exc:
            kept.append(weakref.ref(exc))
        gc.collect()
        return [ref() is None for ref in kept]

    assert Cluster(nodes=2).run_spmd(program)[0] == [True, True]


def test_trio_s_fields_are_read_and_written_at_their_slots_as_getattr_would():
    """The wakes, parks and hand-overs read trio's task, runner and cancel status fields at
    their slots (`kernelsim._trio._Field`). On the trio installed, every one of them must
    be such a slot -- else those calls silently go back to getattr -- and read what
    getattr reads, from a live task inside a run."""
    from kernelsim import _trio as binding
    from trio._core import _run

    rows = []

    async def main():
        await trio.sleep(0)
        task = trio.lowlevel.current_task()
        runner = _run.GLOBAL_RUN_CONTEXT.runner
        with trio.move_on_after(10) as scope:
            rows.extend(binding._read_fields([task, runner, task._cancel_status, runner.deadlines, scope]))

    trio.run(main)
    read = {(cls, name) for cls, name, *_ in rows}
    assert {("Task", "_next_send_fn"), ("Task", "_runner"), ("Task", "context"), ("Runner", "ki_pending"),
            ("CancelStatus", "effectively_cancelled"), ("Deadlines", "_heap"),
            ("CancelScope", "_registered_deadline")} <= read
    for cls, name, at_slot, got, expected in rows:
        assert at_slot, f"{cls}.{name} is not an object slot in this trio"
        assert got is expected, (cls, name, got, expected)


def test_a_stepped_task_is_trio_s_current_task():
    """A task stepped by a modeled wait (the hand-over) is the one trio's run context names
    while it runs -- written in that context's dict for the run's thread -- and runs in
    its own context (contextvars); the stepping task is again once the step is over."""
    import contextvars

    var = contextvars.ContextVar("rank")
    seen = {0: set(), 1: set()}
    mine = {}

    async def program(dp, rank, size):
        mine[rank] = trio.lowlevel.current_task()
        var.set(rank)
        fd = await dp.dp_open(5)
        await dp.dp_target(fd, 1 - rank, 5)
        for _ in range(20):
            if rank == 0:
                await dp.dp_write(fd, b"x")
                await dp.dp_read(fd, 16)
            else:
                await dp.dp_read(fd, 16)
                await dp.dp_write(fd, b"y")
            seen[rank].add((trio.lowlevel.current_task(), var.get()))

    c = Cluster(nodes=2)
    c.run_spmd(program)
    assert c.clock.counter.stepped >= 20
    assert seen == {0: {(mine[0], 0)}, 1: {(mine[1], 1)}}


# A wake that raises (here trio's own `reschedule`, the public calls' way, patched to fail
# for one task) inside an engine event the clock's drive runs. The run must end in that
# error -- not TrioInternalError (the drive is a system task), and not hang in trio's I/O
# wait for a task parked on a kernel path nothing will ever finish. Run in a subprocess,
# bounded: the bug came back as a hang.
_FAILING_WAKE = """
import sys, trio
from trio._core import _run
from libdp import Cluster
from kernelsim import replicates_trio
replicates_trio(False)
who = sys.argv[1]
marked = {}
class Boom(Exception):
    pass
reschedule = _run.Runner.reschedule
def failing(self, task, *args):
    if marked.get("task") is task:
        del marked["task"]
        raise Boom("wake")
    return reschedule(self, task, *args)
_run.Runner.reschedule = failing
async def other():
    await trio.sleep(1e-3)
async def program(dp, rank, size):
    fd = await dp.dp_open(7)
    await dp.dp_target(fd, 1 - rank, 7)
    if rank == 1:
        if who == "reader":
            marked["task"] = trio.lowlevel.current_task()
        return await dp.dp_read(fd, 100)
    async with trio.open_nursery() as n:
        # Another task runnable at the write's instant: the write parks on its path,
        # which the drive finishes -- and that wake fails.
        n.start_soon(other)
        await trio.sleep(1e-3)
        if who == "writer":
            marked["task"] = trio.lowlevel.current_task()
        await dp.dp_write(fd, b"x")
        await trio.sleep(1e-3)
try:
    Cluster(nodes=2, nic="dec21140").run_spmd(program)
except Boom as e:
    print("Boom", e)
"""


@pytest.mark.parametrize("who", ["reader", "writer"])
def test_an_error_in_a_wake_the_drive_runs_is_the_run_s_error(who):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", _FAILING_WAKE, who], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "Boom wake", out.stderr[-2000:]
