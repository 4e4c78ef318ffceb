"""FM's credit-based flow control (FM-C03, FM-A05, FM-A06): fixed credits per peer counted
in packets, refilled by the receiver, and a sender out of credits that keeps extracting
-- which is what lets two hosts sending to each other both finish."""
from __future__ import annotations

import errno

import pytest

from libdp import Cluster
from libdp._fm_bench import run_job
from libdp.fm import FM

JOBS = {"myrinet": (2, (0, 1)), "smt": (1, (0, 0))}


def exchange(transport, count, size, **fm):
    """Both nodes send `count` messages of `size` bytes to each other at once, then wait
    for the other's; the largest number of packets ever in flight to the peer."""
    nodes, placement = JOBS[transport]
    c = Cluster(nodes=nodes, platform="hpvm19", nic="myrinet", load=[("fm", fm)])
    worst = [0, 0]

    async def prog(dp, vnode, placement):
        fm = await FM.open(dp, 5, placement, vnode)
        got = [0]

        async def on_msg(stream, src):
            assert await stream.receive(stream.length) == bytes([vnode ^ 1]) * stream.length
            got[0] += 1

        fm.set_handler(1, on_msg)
        peer = 1 - vnode
        for _ in range(count):
            await fm.send(peer, 1, bytes([vnode]) * size)
            worst[vnode] = max(worst[vnode], fm.stats()["peers"][peer]["in_flight"])
        await fm.extract_until(lambda: got[0] == count)
        st = fm.stats()
        await fm.close()
        return st

    stats = run_job(c, prog, placement)
    return stats, worst


@pytest.mark.parametrize("transport", ["myrinet", "smt"])
def test_two_nodes_sending_to_each_other_with_two_credits_both_finish(transport):
    stats, worst = exchange(transport, 40, 3000, credits=2)           # two packets per message
    for st in stats:
        assert st["messages_received"] == 40 and st["packets_received"] == 80
        assert st["credit_waits"] > 0                                   # they did run out...
    assert max(worst) <= 2                                              # ...and never held more than 2


@pytest.mark.parametrize("transport", ["myrinet", "smt"])
def test_without_extracting_while_out_of_credits_they_deadlock(transport):
    with pytest.raises(OSError) as e:
        exchange(transport, 40, 3000, credits=2, extract_on_wait=False)
    assert e.value.errno == errno.EDEADLK


def test_every_packet_full_or_partial_takes_a_credit_and_refills_come_back():
    stats, worst = exchange("myrinet", 30, 1, credits=4, refill_div=2)
    assert max(worst) <= 4
    # the receiver owed 2 credits every other packet: refills went back, explicitly or on packets
    assert all(st["refills_sent"] > 0 for st in stats)


def test_credits_default_to_the_regions_share_per_peer():
    c = Cluster(nodes=4, platform="hpvm19", nic="myrinet", load=[("fm", {"max_hosts": 30})])

    async def prog(dp, rank, size):
        fm = await FM.open(dp)
        credits = {p: v["credits"] for p, v in fm.stats()["peers"].items()}
        await fm.close()
        return credits

    assert c.run_spmd(prog)[0] == {1: 10, 2: 10, 3: 10}                  # 30 slots shared by 3 peers (FM-A06)


def test_a_region_too_small_for_the_job_is_einval():
    c = Cluster(nodes=3, platform="hpvm19", nic="myrinet", load=[("fm", {"max_hosts": 2, "credits": 2})])
    with pytest.raises(OSError) as e:
        FM.open_sync(c.process(0))
    assert e.value.errno == errno.EINVAL
