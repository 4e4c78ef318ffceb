"""LCI over a faulty Myrinet (seeded loss, corruption, duplication, reordering): I-nirx
and I-hrx deliver every packet exactly once, in FIFO order per sender, intact; I-sdma
stops with an error naming the assumption that broke (LCI-C03); malformed packets are
dropped and counted by the NI."""
from __future__ import annotations

import errno
import json

import pytest

from libdp import Cluster
from libdp.lci import LCI
from libdp._cli import main
from libdp._lci_stress import run_stress


@pytest.mark.parametrize("variant,packets", [("I-nirx", 1000), ("I-hrx", 1000)])
def test_reliable_variants_deliver_exactly_once_in_order_under_faults(variant, packets):
    out = run_stress(variant, nodes=4, packets=packets, seed=3)
    assert out["ok"], out["errors"] or out["missing"]
    assert out["delivered"] == out["packets"] == packets
    f = out["faults"]
    assert f["lost"] + f["corrupted"] + f["duplicated"] > 0          # the run did meet faults
    side = out["ni"] if variant == "I-nirx" else out["host"]
    assert side["retransmitted"] > 0 and side["acks_sent"] > 0
    # Every packet accounted for at the end: nothing unacknowledged, no descriptor pending.
    assert out["host"]["outstanding"] == 0 and out["ni"]["blocked_now"] == 0
    # No spurious retransmissions to speak of: what the receivers drop as duplicates is
    # what the network duplicated, plus the few resends that raced an acknowledgement.
    assert side["duplicates"] <= f["duplicated"] + 0.1 * side["retransmitted"], (side, f)


@pytest.mark.parametrize("variant", ["I-nirx", "I-hrx"])
def test_a_receiver_that_does_not_poll_for_a_while_causes_no_retransmission(variant):
    """No faults: a sender streams more packets than the receiving host's queue holds
    while the receiver sleeps far longer than the retransmission time-out. I-nirx's NI
    acknowledges what it accepted (LCI-C12, C13) and holds the rest in its pool; I-hrx's
    sender times out once and backs off. Nothing is lost, so almost nothing is resent."""
    import trio
    c = Cluster(nodes=2, platform="ppro200_lanai4", nic="myrinet", load=[("lci", {"variant": variant})])
    n = c.nodes[0].services["lci"].costs.host_rx_buffers + 40
    sleep_s = 20 * c.nodes[0].services["lci"].costs.retx_timeout_s

    async def program(dp, rank, size):
        lci = await LCI.open(dp)
        got = []
        lci.set_upcall(lambda p: got.append(bytes(p.data)) and False)
        if rank == 0:
            for i in range(n):
                await lci.send(1, b"%04d" % i)
        else:
            await trio.sleep(sleep_s)
            await lci.poll_until(lambda: len(got) == n)
        await lci.flush()
        stats = lci.stats()
        await lci.close()
        return got, stats
    (_, tx), (got, rx) = c.run_spmd(program)
    assert got == [b"%04d" % i for i in range(n)]
    fw = c.nodes[0].services["lci"].fw.stats()
    resent = fw["retransmitted"] if variant == "I-nirx" else tx["retransmitted"]
    if variant == "I-nirx":
        assert c.nodes[1].services["lci"].fw.stats()["held_for_host_buffer"] > 0     # the queue did fill
        assert resent == 0, fw
    else:
        # The host acknowledges only when it polls: one window goes again per time-out,
        # and the back-off keeps that to a handful in a sleep of 20 time-outs.
        w = c.nodes[0].services["lci"].window
        assert 1 <= tx["timeouts"] <= c.nodes[0].services["lci"].costs.retx_backoff_max and resent <= w * tx["timeouts"], tx


def test_isdma_stops_with_the_broken_assumption():
    with pytest.raises(OSError) as e:
        run_stress("I-sdma", nodes=4, packets=600, seed=3)
    assert e.value.errno == errno.EIO
    assert "reliable network" in str(e.value) and "LCI-C03" in str(e.value)


def test_malformed_packets_are_dropped_and_counted_by_the_ni():
    c = Cluster(nodes=2, platform="ppro200_lanai4", nic="myrinet", load=[("lci", {"variant": "I-sdma"})])
    a, b = LCI.open_sync(c.process(0)), LCI.open_sync(c.process(1))
    got = []
    b.set_upcall(lambda p: got.append(p.data) and False)
    board = c.nodes[1].pci_devices[0]
    for junk in (b"\x01", b"\x00" * 5, b"\x7f" * 6, b"\x00" * 3 + b"\x99" * 40):
        board.rx_frame(junk, True)                  # straight off the link into the armed buffer
        c.engine.run(c.engine.now + 20e-6)         # modeled time passes: the NI looks at it
    a.sync.send(1, b"after the junk")
    b.sync.poll_until(lambda: got)
    assert got == [b"after the junk"]
    fw = c.nodes[1].services["lci"].fw.stats()
    assert sum(fw["malformed"].values()) == 4 and c.nodes[1].pci_devices[0].rx_no_buffer == 0
    a.sync.close()
    b.sync.close()


def test_dp_lci_stress_reports_and_fails_with_one_line(capsys):
    assert main(["lci-stress", "--variant", "I-nirx", "--packets", "300", "--nodes", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (row,) = doc["results"]
    assert row["ok"] and row["delivered"] == row["packets"] == 300 and doc["fault_rates"]["fault.loss"] == 0.01
    assert main(["lci-stress", "--variant", "I-sdma", "--packets", "600"]) == 1
    err = capsys.readouterr().err.strip()
    assert "LCI-C03" in err and len(err.splitlines()) == 1
