"""The binding of modeled calls to trio: parks, wakes, cancellation, where errors surface.

`kernelsim._trio` parks and wakes tasks through C replicas of trio's `reschedule` and
`wait_task_rescheduled` when this trio's sources match them, else through trio's public
calls. Both must give the same modeled results and the same behaviour; these tests run
both ways.
"""
from __future__ import annotations

import errno

import pytest
import trio

from kernelsim import replicates_trio
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
