"""LCI's `poll_until` in modeled time is a poll loop the engine runs (`kernelsim._spin`,
`CallableSpin`): the polling task parks once for the whole loop instead of being woken by
trio at every packet, and a cancelled loop stops polling. (That the modeled figures are
those of the task polling itself is tests/test_golden.py's business: the lci_* cases.)"""
from __future__ import annotations

import trio

from libdp import Cluster
from libdp.lci import LCI


def lci_cluster(variant="I-sdma"):
    return Cluster(nodes=2, nic="myrinet", seed=0, load=[("lci", {"variant": variant})])


class _Steps(trio.abc.Instrument):
    """Counts how often trio runs each task (a step: a resume up to its next park)."""

    def __init__(self):
        self.steps = {}

    def before_task_step(self, task):
        self.steps[task] = self.steps.get(task, 0) + 1


def test_a_polling_receiver_is_not_woken_per_packet():
    packets = 500
    steps = _Steps()
    tasks = {}

    async def prog(dp, rank, size):
        if rank == 0:
            trio.lowlevel.add_instrument(steps)
        tasks[rank] = trio.lowlevel.current_task()
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

    polls = lci_cluster().run_spmd(prog)
    assert polls[1] >= packets / 8                 # it did poll for the packets...
    assert steps.steps[tasks[1]] < 40              # ...without trio running it for each


def test_a_cancelled_poll_loop_stops_polling_and_the_library_goes_on():
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


def test_an_upcall_error_is_raised_where_the_program_polls():
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


def test_a_predicate_error_is_raised_where_the_program_polls():
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
