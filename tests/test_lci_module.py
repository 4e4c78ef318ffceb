"""The lci module's life in the kernel and LCI's API from a script: insmod takes the
LANai from an idle DP and rmmod gives it back, a live endpoint keeps the module (EBUSY),
bad parameters are EINVAL and leave the kernel as it was; packets arrive in FIFO order
per sender, may be kept and released out of order, and NI-to-NI credits hold a sender
back while the receiver's buffers are full (LCI-C01, C02, C07)."""
from __future__ import annotations

import errno

import pytest

from libdp import Cluster
from libdp.lci import LCI
from protocols.lci import parse_variant, resolve

PPRO = "ppro200_lanai4"


def lci_cluster(variant="I-sdma", nodes=2, platform=PPRO, **kw):
    return Cluster(nodes=nodes, platform=platform, nic="myrinet", load=[("lci", {"variant": variant})], **kw)


def snapshot(node):
    return (tuple(sorted(m["name"] for m in node.modules.lsmod())), tuple(sorted(node.syscalls)),
            tuple(sorted(node.services)), {m["name"]: m["use_count"] for m in node.modules.lsmod()},
            node.mem.in_use())


def dp_roundtrip(cluster):
    a, b = cluster.process(0), cluster.process(1)
    fa = a.sync.dp_open(7)
    a.sync.dp_target(fa, 1, 7)
    fb = b.sync.dp_open(7)
    a.sync.dp_write(fa, b"over DP again")
    got = b.sync.dp_read(fb, 64)
    a.sync.close(fa)
    b.sync.close(fb)
    return got


def test_insmod_displaces_dp_and_rmmod_gives_it_back():
    c = Cluster(nodes=2, platform=PPRO, nic="myrinet")
    before = [snapshot(n) for n in c.nodes]
    for n in c.nodes:
        n.modules.insmod("lci", variant="I-pio")
        names = [m["name"] for m in n.modules.lsmod()]
        assert "lci" in names and "dp" not in names
        assert "lci_open" in n.syscalls and n.services["lci"].variant.name == "I-pio"
    for n in c.nodes:
        n.modules.rmmod("lci")
    assert [snapshot(n) for n in c.nodes] == before
    assert dp_roundtrip(c) == b"over DP again"


@pytest.mark.parametrize("params", [{"variant": "I-bogus"}, {"variant": "sdma"}, {"mtu": "3000"},
                                    {"transfer": "teleport"}, {"variant": "I-rcpy", "reliability": "host"},
                                    {"variant": "I-pio-rcpy"}, {"nosuch": "1"}, {"window": "-1"}])
def test_bad_parameters_are_einval_and_leave_the_kernel_as_it_was(params):
    c = Cluster(nodes=2, platform=PPRO, nic="myrinet")
    node = c.nodes[0]
    before = snapshot(node)
    with pytest.raises(OSError) as e:
        node.modules.insmod("lci", **params)
    assert e.value.errno == errno.EINVAL
    assert snapshot(node) == before
    assert dp_roundtrip(c) == b"over DP again"


def test_live_endpoint_keeps_the_module_and_one_process_per_node():
    c = lci_cluster()
    node = c.nodes[0]
    lci = LCI.open_sync(c.process(0))
    with pytest.raises(OSError) as e:
        node.modules.rmmod("lci")
    assert e.value.errno == errno.EBUSY
    with pytest.raises(OSError) as e:
        LCI.open_sync(c.process(0))
    assert e.value.errno == errno.EBUSY                    # LCI-A54: one LCI process per node
    lci.sync.close()
    node.modules.rmmod("lci")
    assert not node.modules.loaded("lci")


def test_variant_names_are_mechanism_choices():
    assert parse_variant("I-sdma") == resolve("I-sdma")
    v = parse_variant("I-pio-1k")
    assert (v.reliability, v.transfer, v.mtu) == ("none", "pio", 1024) and v.name == "I-pio-1k"
    assert parse_variant("I-nirx").reliability == "ni" and parse_variant("I-hrx").reliability == "host"
    assert resolve("I-sdma", transfer="rcpy").name == "I-rcpy"
    v = parse_variant("I-sdma-hmc")                         # the host forwards multicast (LCI-C20)
    assert (v.reliability, v.multicast, v.name) == ("none", "host", "I-sdma-hmc")
    assert parse_variant("I-hrx").multicast == "host" and parse_variant("I-nirx").multicast == "ni"
    with pytest.raises(OSError) as e:
        parse_variant("I-sdma-mpimc")                       # MPICH's broadcast is libdp's, not a variant
    assert e.value.errno == errno.EINVAL and "MPICH" in str(e.value)


def _misuse(lci, peer_buf):
    cases = [
        (lambda: lci.sync.send(0, b"x"), errno.EINVAL),                 # to itself
        (lambda: lci.sync.send("1", b"x"), errno.EINVAL),
        (lambda: lci.sync.send(99, b"x"), errno.EHOSTUNREACH),
        (lambda: lci.sync.send(1, b"x" * (lci.mtu + 1)), errno.EMSGSIZE),
        (lambda: lci.sync.send(1, 12345), errno.EINVAL),
        (lambda: lci.sync.send(1, (peer_buf, 0, 4)), errno.EFAULT),     # another process's memory
        (lambda: lci.set_upcall(42), errno.EINVAL),
        (lambda: lci.sync.release(object()), errno.EINVAL),
        (lambda: lci.sync.wait(), errno.EINVAL),                        # interrupts off
        (lambda: lci.sync.rcpy(1, lci.alloc(64), 0, 0, 64), errno.EOPNOTSUPP),
    ]
    for call, want in cases:
        with pytest.raises(OSError) as e:
            call()
        assert e.value.errno == want, (e.value, want)


def test_api_misuse_is_an_oserror_with_errno_and_the_endpoint_still_works():
    c = lci_cluster()
    a, b = LCI.open_sync(c.process(0)), LCI.open_sync(c.process(1))
    _misuse(a, b.alloc(64))
    got = []
    b.set_upcall(lambda p: got.append(p.data) and False)
    a.sync.send(1, b"still fine")
    b.sync.poll_until(lambda: got)
    assert got == [b"still fine"]
    a.sync.close()
    with pytest.raises(OSError) as e:
        a.sync.send(1, b"x")
    assert e.value.errno == errno.EBADF
    b.sync.close()


def _fifo_program(n_msgs, keep):
    async def program(dp, rank, size):
        lci = await LCI.open(dp)
        got, kept = [], []

        def upcall(pkt):
            got.append((pkt.src, pkt.data))
            if keep and len(kept) < keep:
                kept.append(pkt)
                return True
            return False

        lci.set_upcall(upcall)
        if rank != 0:
            for i in range(n_msgs):
                await lci.send(0, b"%d:%04d" % (rank, i) + bytes(i % 200))
            await lci.flush()
        else:
            await lci.poll_until(lambda: len(got) >= n_msgs * (size - 1))
            for pkt in reversed(kept):              # out of order, long after their upcalls
                await lci.release(pkt)
        stats = lci.stats()
        await lci.close()
        return got, stats
    return program


@pytest.mark.parametrize("variant", ["I-sdma", "I-pio", "I-rcpy", "I-nirx", "I-hrx", "I-1k", "I-4k", "I-pio-1k"])
def test_packets_arrive_once_in_fifo_order_per_sender(variant):
    c = lci_cluster(variant, nodes=3)
    (got, _), *_ = c.run_spmd(_fifo_program(40, keep=0))
    for src in (1, 2):
        mine = [d for s, d in got if s == src]
        assert mine == [b"%d:%04d" % (src, i) + bytes(i % 200) for i in range(40)]


def test_credits_hold_the_sender_back_and_kept_packets_released_out_of_order_return_them():
    """The receiver keeps the first W packets: the sender's NI runs out of credits for it
    and queues the rest per destination; the packets flow again only as buffers come back."""
    c = lci_cluster("I-sdma", nodes=2)
    w = c.nodes[0].services["lci"].window
    results = c.run_spmd(_fifo_program(4 * w, keep=w))
    got, _ = results[0]
    assert [d[:6] for s, d in got] == [b"1:%04d" % i for i in range(4 * w)]
    fw = c.nodes[1].services["lci"].fw.stats()
    assert fw["blocked"] > 0                            # LCI-C05: queued per destination
    assert c.nodes[0].services["lci"].fw.stats()["acks_sent"] > 0   # half-window acks (no return traffic)


def test_window_is_derived_from_ni_memory_and_mtu():
    ws = {v: lci_cluster(v, nodes=2).nodes[0].services["lci"].window for v in ("I-1k", "I-sdma", "I-4k")}
    assert ws["I-1k"] == 2 * ws["I-sdma"] == 4 * ws["I-4k"] >= 2
    p3 = lci_cluster("I-sdma", nodes=2, platform="p3_1000_lanai9").nodes[0].services["lci"].window
    assert p3 > ws["I-sdma"]                            # LANai 9: more SRAM, more buffers per sender


@pytest.mark.parametrize("platform", [PPRO, "p3_1000_lanai9"])
def test_one_window_rule_for_every_variant(platform):
    """The go-back-N variants use the W of NI memory too (costs.py): same as I-sdma's."""
    ws = {v: lci_cluster(v, platform=platform).nodes[0].services["lci"].window for v in ("I-sdma", "I-nirx", "I-hrx")}
    assert ws["I-nirx"] == ws["I-hrx"] == ws["I-sdma"]


def test_interrupt_receive_through_the_polling_watchdog():
    """A process asleep in wait() is woken by the watchdog's interrupt, no sooner than
    the timeout after the packet landed unpolled (LCI-C09)."""
    async def program(dp, rank, size):
        lci = await LCI.open(dp)
        got = []
        lci.set_upcall(lambda p: got.append(p.data) and False)
        if rank == 0:
            await lci.send(1, b"wake up")
            t = None
        else:
            await lci.set_interrupts(True)
            t0 = dp.now()
            assert await lci.wait() == 1
            t = dp.now() - t0
        stats = lci.stats()
        await lci.close()
        return got, stats, t
    c = lci_cluster()
    _, (got, stats, t) = c.run_spmd(program)
    assert got == [b"wake up"] and stats["signals"] >= 1
    timeout = c.nodes[1].services["lci"].costs.watchdog_s
    assert t >= timeout
    assert c.nodes[1].services["lci"].fw.stats()["watchdog_interrupts"] >= 1
