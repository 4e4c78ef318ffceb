"""A program's poll loop in modeled time is a loop the engine runs (`kernelsim/_spin.pyx`):
SP AM's ``poll_until`` (`libdp/_am_call.pyx`, `_AmSpin`) and LCI's (`libdp/lci.py`, a
`CallableSpin`). The polling task parks once for the whole loop instead of being woken by
trio at every packet, a cancelled loop stops polling, and an error in the loop is raised
where the program polls. (That the modeled figures are the same as when the task polled
itself is tests/test_golden.py's business: the am_* and lci_* cases.)"""
from __future__ import annotations

import trio

from libdp import Cluster
from libdp.am import AM
from libdp.lci import LCI

H_DATA, H_PING, H_PONG = 1, 2, 3


def am_cluster():
    return Cluster(nodes=2, nic="tb2", seed=0, load=[("am", {})])


class _Steps(trio.abc.Instrument):
    """Counts how often trio runs each task (a step: a resume up to its next park)."""

    def __init__(self):
        self.steps = {}

    def before_task_step(self, task):
        self.steps[task] = self.steps.get(task, 0) + 1


def _polls_and_receiver_steps(cluster, exchange):
    """Run ``exchange(dp, rank)`` on both ranks (it returns that rank's poll count): the
    receiver's polls, and how often trio stepped the receiver's task."""
    steps = _Steps()
    tasks = {}

    async def prog(dp, rank, size):
        if rank == 0:
            trio.lowlevel.add_instrument(steps)
        tasks[rank] = trio.lowlevel.current_task()
        return await exchange(dp, rank)

    polls = cluster.run_spmd(prog)
    return polls[1], steps.steps[tasks[1]]


def test_a_polling_am_receiver_is_not_woken_per_packet():
    transfers = 2000

    async def exchange(dp, rank):
        am = await AM.open(dp)
        landed = []
        am.set_handler(H_DATA, lambda tok, addr, nbytes, arg: landed.append(arg))
        seg = am.segment(64)
        if rank == 0:
            for i in range(transfers):
                await am.am_store_async(1, seg.addr, seg.addr, 16, H_DATA, i)
        else:
            await am.poll_until(lambda: len(landed) == transfers)
            assert landed == list(range(transfers))
        await am.close()
        return am.stats()["polls"]

    polls, steps = _polls_and_receiver_steps(am_cluster(), exchange)
    assert polls >= transfers / 8                  # it did poll for the packets...
    assert steps < 40                              # ...without trio running it for each


def test_a_cancelled_am_poll_loop_stops_polling_and_the_endpoint_goes_on():
    c = am_cluster()
    seen = {}

    async def prog(dp, rank, size):
        am = await AM.open(dp)
        got = []
        am.set_handler(H_PING, lambda tok, k: (got.append(k), tok.reply(H_PONG, k)))
        am.set_handler(H_PONG, lambda tok, k: got.append(("pong", k)))
        if rank == 0:
            with trio.move_on_after(200e-6) as scope:        # modeled seconds: nothing comes
                await am.poll_until(lambda: False)
            seen["cancelled"] = scope.cancelled_caught
            seen["spinner_after_cancel"] = am.ep.events.spinner
            await am.am_request_1(1, H_PING, 1)              # rank 1 answers, then pings back
            await am.poll_until(lambda: ("pong", 1) in got)
            handled = am.stats()["handlers_run"]
            await trio.sleep(500e-6)                         # rank 1's ping lands; nobody polls
            seen["handled_while_not_polling"] = am.stats()["handlers_run"] - handled
            await am.poll_until(lambda: 2 in got)
            seen["handled_once_polling"] = am.stats()["handlers_run"] - handled
        else:
            await am.poll_until(lambda: 1 in got)
            await am.am_request_1(0, H_PING, 2)
            await am.poll_until(lambda: ("pong", 2) in got)
        await am.close()

    c.run_spmd(prog)
    assert seen["cancelled"] and seen["spinner_after_cancel"] is None
    assert seen["handled_while_not_polling"] == 0
    assert seen["handled_once_polling"] == 1


def test_two_tasks_polling_one_am_endpoint_both_see_their_messages():
    c = am_cluster()
    seen = {}

    async def prog(dp, rank, size):
        am = await AM.open(dp)
        got = []
        am.set_handler(H_PING, lambda tok, k: got.append(k))
        if rank == 1:
            async def until(k):
                await am.poll_until(lambda: k in got)
                seen[k] = dp.now()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(until, 2)             # each parks in its own spin
                nursery.start_soon(until, 1)
                await am.poll_until(lambda: 3 in got)
        else:
            for k in (1, 2, 3):
                await trio.sleep(100e-6)
                await am.am_request_1(1, H_PING, k)
        await am.close()

    c.run_spmd(prog)
    assert set(seen) == {1, 2} and seen[1] < seen[2]


# -- LCI ---------------------------------------------------------------------------------


def lci_cluster(variant="I-sdma"):
    return Cluster(nodes=2, nic="myrinet", seed=0, load=[("lci", {"variant": variant})])


def test_a_polling_lci_receiver_is_not_woken_per_packet():
    packets = 500

    async def exchange(dp, rank):
        lci = await LCI.open(dp)
        got = []
        lci.set_upcall(lambda pkt: got.append(pkt.data))
        if rank == 0:
            for i in range(packets):
                await lci.send(1, i.to_bytes(4, "big"))
        else:
            await lci.poll_until(lambda: len(got) == packets)
            assert got == [i.to_bytes(4, "big") for i in range(packets)]
        polls = lci.stats()["polls"]
        await lci.close()
        return polls

    polls, steps = _polls_and_receiver_steps(lci_cluster(), exchange)
    assert polls >= packets / 8                    # it did poll for the packets...
    assert steps < 40                              # ...without trio running it for each


def test_a_cancelled_lci_poll_loop_stops_polling_and_the_library_goes_on():
    seen = {}

    async def prog(dp, rank, size):
        lci = await LCI.open(dp)
        got = []
        lci.set_upcall(lambda pkt: got.append(pkt.data))
        if rank == 0:
            with trio.move_on_after(200e-6) as scope:        # modeled seconds: nothing comes
                await lci.poll_until(lambda: False)
            seen["cancelled"] = scope.cancelled_caught
            seen["spinner_after_cancel"] = lci.lib.events.spinner
            polls = lci.stats()["polls"]
            await lci.send(1, b"go")
            await trio.sleep(500e-6)                         # rank 1's answer lands; nobody polls
            seen["polls_while_not_polling"] = lci.stats()["polls"] - polls
            seen["got_while_not_polling"] = list(got)
            await lci.poll_until(lambda: got)
            seen["got"] = list(got)
        else:
            await lci.poll_until(lambda: got)
            await lci.send(0, b"back")
        await lci.close()

    lci_cluster().run_spmd(prog)
    assert seen["cancelled"] and seen["spinner_after_cancel"] is None
    assert seen["polls_while_not_polling"] == 0 and seen["got_while_not_polling"] == []
    assert seen["got"] == [b"back"]


def test_an_lci_upcall_error_is_raised_where_the_program_polls():
    async def prog(dp, rank, size):
        lci = await LCI.open(dp)

        def upcall(pkt):
            raise ValueError(f"bad packet {pkt.data!r}")
        lci.set_upcall(upcall)
        try:
            if rank == 0:
                await lci.send(1, b"x")
                return None
            try:
                await lci.poll_until(lambda: False)
            except ValueError as e:
                return str(e)
        finally:
            await lci.close()

    assert lci_cluster().run_spmd(prog)[1] == "bad packet b'x'"


def test_an_lci_predicate_error_is_raised_where_the_program_polls():
    async def prog(dp, rank, size):
        lci = await LCI.open(dp)
        got = []
        lci.set_upcall(lambda pkt: got.append(pkt.data))
        try:
            if rank == 0:
                await lci.send(1, b"x")
                return None
            try:
                await lci.poll_until(lambda: got and 1 / 0)
            except ZeroDivisionError:
                return got
        finally:
            await lci.close()

    assert lci_cluster().run_spmd(prog)[1] == [b"x"]
