"""The TB2's two users: the user-level FIFOs (one process per node) and the kernel
driver DP runs over -- FIFO semantics as a process sees them, one client at a time
(EBUSY), DP over the switch, and module load/unload/failure leaving the kernel as it
was.
"""
from __future__ import annotations

import functools

import errno

import pytest
import trio

from kernelsim import Engine, Node, WouldBlock
from libdp import Cluster
from libdp._cluster import build_profile
from nic_drivers import tb2
from nic_drivers.tb2 import _model as hw
from nic_drivers.tb2 import open_fifos


def raw_cluster(nodes=2, params=(), seed=0):
    """A TB2 cluster with DP unloaded: the FIFOs are free for a user process."""
    c = Cluster(nodes=nodes, nic="tb2", params=list(params), seed=seed)
    for n in c.nodes:
        n.modules.rmmod("dp")
    return c


def adapter(node):
    return node.pci_devices[0]


# --------------------------------------------------------------------------- user FIFOs


def test_user_send_and_poll_carry_data_source_proto_and_user_header():
    c = raw_cluster()

    async def prog(dp, rank, size):
        f = open_fifos(dp._proc)
        try:
            if rank == 0:
                await f.send(dp, 1, b"payload", proto=0x4242, user=b"AMhdr")
                return (await f.recv(dp)).data
            pkt = await f.recv(dp)
            await f.send(dp, 0, pkt.data[::-1])
            return (pkt.src, pkt.data, pkt.proto, pkt.route, pkt.user[:5])
        finally:
            f.close()

    r0, r1 = c.run_spmd(prog)
    assert r1 == (0, b"payload", 0x4242, 1, b"AMhdr")
    assert r0 == b"daolyap"


def test_poll_of_an_empty_fifo_returns_none_and_touches_no_bus():
    c = raw_cluster()
    node = c.nodes[0]
    f = open_fifos(node)
    a = adapter(node)
    reads, writes = a.reg_reads, a.reg_writes
    t0 = c.engine.now
    assert node.run_now(f.poll_path()) is None
    assert (a.reg_reads, a.reg_writes) == (reads, writes)     # host memory only
    assert c.engine.now - t0 == pytest.approx(f.c_poll)
    f.close()


def test_send_costs_one_microchannel_store_and_the_flushes():
    c = raw_cluster()
    node, p = c.nodes[0], c.profile
    f = open_fifos(node)
    a = adapter(node)
    w = a.reg_writes
    t0 = c.engine.now
    node.run_now(f.send_path(1, bytes(100)))
    spent = c.engine.now - t0
    assert a.reg_writes == w + 1
    lines = (32 + 100 + 63) // 64
    expect = (p["tb2.send_cycles"] / p["cpu.hz"] + lines * p["cache.flush_line_s"] + p["cache.sync_s"]
              + p["pci.write_s"] + p["mem.copy_base_s"] + 100 / p["mem.copy_rate_Bps"])
    assert spent == pytest.approx(expect)
    f.close()


def test_bulk_send_stores_several_lengths_per_microchannel_access():
    c = raw_cluster()
    n0 = c.nodes[0]
    f = open_fifos(n0)
    g = open_fifos(c.nodes[1])
    a = adapter(n0)
    w = a.reg_writes
    t0 = c.engine.now
    assert n0.run_now(f.bulk_send_path(1, [bytes([k]) * 10 for k in range(8)])) == 8
    bulk_time = c.engine.now - t0
    assert a.reg_writes == w + 2                          # entries 0-3 and 4-7: two word stores
    t0 = c.engine.now
    for k in range(8):
        n0.run_now(f.send_path(1, bytes([k]) * 10))
    single_time = c.engine.now - t0
    assert a.reg_writes == w + 2 + 8
    assert bulk_time < single_time
    c.engine.run()
    got = [c.nodes[1].run_now(g.poll_path()) for _ in range(16)]
    assert [p.data for p in got] == [bytes([k]) * 10 for k in range(8)] * 2
    f.close()
    g.close()


def test_unaligned_bulk_run_never_rewrites_an_older_entrys_length():
    c = raw_cluster()
    f = open_fifos(c.nodes[0])
    f.fifos.tx_next = 3                                   # start mid-word
    stores = f.fifos.length_stores(3, [9] * 6)
    assert [(off, w) for off, _v, w in stores] == [(3, 1), (4, 4), (8, 1)]
    stores = f.fifos.length_stores(126, [9] * 4)         # wraps at the FIFO's end
    assert [(off, w) for off, _v, w in stores] == [(126, 2), (0, 2)]
    f.close()


def _length_stores_reference(first, values, count):
    """`HostFifos.length_stores` as it was written in Python ints (the C one must agree)."""
    stores, i, n = [], 0, len(values)
    while i < n:
        idx = (first + i) % count
        width = 1
        for w in (4, 2):
            if idx % w == 0 and i + w <= n and idx + w <= count:
                width = w
                break
        v = 0
        for k in range(width):
            v = (v << 8) | values[i + k]
        stores.append((hw.REG_LEN + idx, v, width))
        i += width
    return stores


def test_length_stores_agree_with_their_python_definition():
    import random
    c = raw_cluster()
    f = open_fifos(c.nodes[0])
    rng = random.Random(5)
    count = f.fifos.send_count
    for _ in range(300):
        first = rng.randrange(count)
        values = [rng.randrange(1, 65) for _ in range(rng.randrange(0, 40))]
        assert f.fifos.length_stores(first, values) == _length_stores_reference(first, values, count)
    f.close()


def test_lazy_pops_one_microchannel_store_every_k_messages():
    c = raw_cluster()
    n0, n1 = c.nodes
    f, g = open_fifos(n0, pop_every=4), open_fifos(n1, pop_every=4)
    for k in range(10):
        n0.run_now(f.send_path(1, bytes([k])))
    c.engine.run()
    a = adapter(n1)
    w = a.reg_writes
    got = [n1.run_now(g.poll_path()).data for _ in range(10)]
    assert got == [bytes([k]) for k in range(10)]
    assert a.reg_writes == w + 2 and a.pops == 2          # after the 4th and the 8th
    assert a.reg_read(hw.REG_RX_USED) == 2                # two taken, not yet popped
    f.close()
    g.close()


def test_receive_fifo_overflow_drops_and_counts_then_recovers():
    """Nobody polls: the receive FIFO (64 per active node, SP-A20) fills, the rest is
    dropped and counted (SP-C05: input-buffer overflow)."""
    c = raw_cluster()
    n0, n1 = c.nodes
    f, g = open_fifos(n0), open_fifos(n1, pop_every=1)
    cap = g.fifos.recv_count
    assert cap == 128
    for _ in range(2):
        n0.run_now(f.bulk_send_path(1, [bytes([k % 256]) for k in range(100)]))
        c.engine.run()
    a = adapter(n1)
    assert a.rx_packets == cap and a.rx_overflow == 200 - cap
    got = []
    while (p := n1.run_now(g.poll_path())) is not None:
        got.append(p.data)
    assert len(got) == cap and got[:100] == [bytes([k]) for k in range(100)]
    n0.run_now(f.send_path(1, b"after"))                  # popped: room again
    c.engine.run()
    assert n1.run_now(g.poll_path()).data == b"after"
    f.close()
    g.close()


def test_full_send_fifo_reads_the_counter_then_would_block_then_drains():
    c = raw_cluster(params=[("tb2.send_fifo_entries", 4)])
    n0 = c.nodes[0]
    open_fifos(c.nodes[1])
    f = open_fifos(n0)
    n0.run_now(f.bulk_send_path(1, [b"x"] * 4))
    a = adapter(n0)
    reads = a.reg_reads
    with pytest.raises(WouldBlock):
        n0.run_now(f.send_path(1, b"y"))
    assert a.reg_reads == reads + 1                       # one transmit-done read, 1 us
    assert f.fifos.tx_refreshes == 1

    async def main():
        from libdp import DP
        dp = DP(f.proc)
        await f.send(dp, 1, b"y")                         # still full: wait for the adapter, then go
        return f.fifos.tx_refreshes

    assert c.run(main) == 3                               # read (full), woken, read (room)
    assert f.sent == 5
    f.close()


def test_packet_too_big_bad_route_and_bad_destination():
    c = raw_cluster()
    f = open_fifos(c.nodes[0])
    n0 = c.nodes[0]
    for args, kw, code in [((1, bytes(225)), {}, errno.EMSGSIZE), ((1, b""), {"route": 4}, errno.EINVAL),
                           ((-1, b""), {}, errno.EINVAL), ((1, "text"), {}, errno.EFAULT),
                           ((1, b""), {"user": bytes(17)}, errno.EINVAL)]:
        with pytest.raises(OSError) as ei:
            n0.run_now(f.send_path(*args, **kw))
        assert ei.value.errno == code
    n0.run_now(f.send_path(1, bytes(224)))                # the largest packet is fine
    f.close()
    with pytest.raises(OSError) as ei:
        n0.run_now(f.send_path(1, b""))
    assert ei.value.errno == errno.EBADF


# --------------------------------------------------------------------------- one client


def test_second_open_is_ebusy_and_close_frees_the_card():
    c = raw_cluster()
    node = c.nodes[0]
    f = open_fifos(c.nodes[0])
    with pytest.raises(OSError) as ei:
        open_fifos(c.nodes[0])
    assert ei.value.errno == errno.EBUSY
    with pytest.raises(OSError) as ei:
        node.modules.rmmod("tb2")                          # mapped: the driver stays
    assert ei.value.errno == errno.EBUSY
    f.close()
    g = open_fifos(c.nodes[0])
    g.close()
    node.modules.rmmod("tb2")


def test_process_exit_unmaps_the_fifos():
    c = raw_cluster()
    proc = c.nodes[0].spawn("user")
    open_fifos(proc)
    proc.exit()
    open_fifos(c.nodes[0]).close()


def test_user_fifos_while_dp_runs_over_the_card_is_ebusy():
    c = Cluster(nodes=2, nic="tb2")
    with pytest.raises(OSError) as ei:
        open_fifos(c.nodes[0])
    assert ei.value.errno == errno.EBUSY and "dp" in str(ei.value)


def test_loading_dp_while_a_process_has_the_fifos_is_ebusy_and_changes_nothing():
    c = raw_cluster()
    node = c.nodes[0]
    f = open_fifos(c.nodes[0])
    before = snapshot(node)
    with pytest.raises(OSError) as ei:
        node.modules.modprobe("dp")
    assert ei.value.errno == errno.EBUSY
    assert snapshot(node) == before and adapter(node).owner is f
    f.close()
    node.modules.modprobe("dp")                           # free again: DP comes up
    assert adapter(node).owner is node.netdevs["tb0"]


def test_close_lets_packets_already_handed_over_go_out():
    c = raw_cluster()
    n0, n1 = c.nodes
    g = open_fifos(n1)
    f = open_fifos(n0)
    n0.run_now(f.send_path(1, b"last words"))
    f.close()                                             # the adapter still has the packet
    with pytest.raises(OSError):
        open_fifos(n0)                                    # draining: still the card's owner
    c.engine.run()
    assert n1.run_now(g.poll_path()).data == b"last words"
    open_fifos(n0).close()                                # drained and released
    g.close()


def test_no_tb2_module_no_fifos():
    c = raw_cluster()
    c.nodes[0].modules.rmmod("tb2")
    with pytest.raises(OSError) as ei:
        open_fifos(c.nodes[0])
    assert ei.value.errno == errno.ENODEV


# --------------------------------------------------------------------------- DP over TB2


async def _dp_exchange(dp, rank, size, messages):
    fd = await dp.dp_open(7)
    await dp.dp_target(fd, 1 - rank, 7)
    await trio.sleep(1e-4)
    got = []
    for m in messages:
        if rank == 0:
            await dp.dp_write(fd, m)
            tok = await dp.dp_read_token(fd)
            got.append((bytes(tok.data), tok.source))
            tok.release()
        else:
            tok = await dp.dp_read_token(fd)
            data, src = bytes(tok.data), tok.source
            tok.release()
            got.append((data, src))
            await dp.dp_write(fd, data[::-1])
    return got


def test_dp_over_tb2_data_intact_and_source_right():
    messages = [b"", b"x", bytes(range(216)), b"directed point over the SP switch"]
    r0, r1 = Cluster(nodes=2, nic="tb2").run_spmd(_dp_exchange, messages)
    assert r1 == [(m, (0, 7)) for m in messages]
    assert r0 == [(m[::-1], (1, 7)) for m in messages]


def test_dp_message_larger_than_a_packet_is_emsgsize():
    c = Cluster(nodes=2, nic="tb2")
    a = c.process(0)
    fd = a.sync.dp_open(3)
    a.sync.dp_target(fd, 1, 3)
    assert c.nodes[0].services["dp"].max_message == 216
    a.sync.dp_write(fd, bytes(216))
    with pytest.raises(OSError) as ei:
        a.sync.dp_write(fd, bytes(217))
    assert ei.value.errno == errno.EMSGSIZE


def test_dp_burst_with_a_one_entry_interrupt_budget_delivers_everything():
    """A handler that spends its budget leaves the interrupt pending: the line brings it back."""
    c = Cluster(nodes=2, nic="tb2")
    for n in c.nodes:
        n.modules.rmmod("dp")
        n.modules.rmmod("tb2")
        n.modules.insmod("tb2", budget=1)
        n.modules.insmod("dp")
    a, b = c.process(0), c.process(1)
    fa, fb = a.sync.dp_open(1), b.sync.dp_open(1)
    a.sync.dp_target(fa, 1, 1)
    for k in range(20):
        a.sync.dp_write(fa, bytes([k]) * 30)
    got = [b.sync.dp_read(fb, 100) for _ in range(20)]
    assert got == [bytes([k]) * 30 for k in range(20)]
    assert c.nodes[1].irq.stats()["irq3"]["interrupts"] >= 20


def test_dp_survives_loss_and_corruption_and_counts_them():
    from libdp import bandwidth
    c = Cluster(nodes=2, nic="tb2", params=[("fault.loss", 0.05), ("fault.corrupt", 0.05)], seed=3)
    rows = c.run_spmd(functools.partial(bandwidth, iters=1, window=300, warmup=0), [100])[0]
    f = c.medium.stats()["faults"]
    assert f["lost"] > 0 and f["corrupted"] > 0
    assert adapter(c.nodes[0]).rx_crc_errors + adapter(c.nodes[1]).rx_crc_errors == f["corrupted"]
    assert 0 < rows[0]["delivered"] < 300


# --------------------------------------------------------------------------- module lifecycle


def snapshot(node):
    return (sorted(node.netdevs), [m["name"] for m in node.modules.lsmod()], node.irq.stats(),
            node.mem.in_use(), [d.driver for d in node.pci_devices], [getattr(d, "owner", None) for d in node.pci_devices],
            sorted(node.syscalls), sorted(node.services))


def bare_node(with_card=True):
    prof = build_profile("sp_thin")
    node = Node(0, prof, Engine())
    node.hosts = {0: {"tb2": tb2.hwaddr_for(0)}, 1: {"tb2": tb2.hwaddr_for(1)}}
    if with_card:
        tb2.make_device(node)
    return node


def test_insmod_then_rmmod_leaves_the_kernel_as_it_was():
    node = bare_node()
    before = snapshot(node)
    node.modules.insmod("tb2")
    assert "tb0" in node.netdevs and node.pci_devices[0].driver is node.netdevs["tb0"]
    node.modules.insmod("dp")
    assert adapter(node).owner is node.netdevs["tb0"] and node.mem.in_use() > 0
    node.modules.rmmod("dp")
    assert adapter(node).owner is None
    node.modules.rmmod("tb2")
    assert snapshot(node) == before


@pytest.mark.parametrize("params,code", [
    ({"pop_every": 0}, errno.EINVAL), ({"pop_every": "many"}, errno.EINVAL), ({"budget": 0}, errno.EINVAL),
    ({"irq_holdoff_us": -1.0}, errno.EINVAL), ({"nonsense": 1}, errno.EINVAL)])
def test_insmod_with_a_bad_parameter_changes_nothing(params, code):
    node = bare_node()
    before = snapshot(node)
    with pytest.raises(OSError) as ei:
        node.modules.insmod("tb2", **params)
    assert ei.value.errno == code
    assert snapshot(node) == before


def test_failing_probe_without_a_card_changes_nothing():
    node = bare_node(with_card=False)
    before = snapshot(node)
    with pytest.raises(OSError) as ei:
        node.modules.insmod("tb2")
    assert ei.value.errno == errno.ENODEV
    assert snapshot(node) == before


def test_init_failing_after_binding_the_card_unwinds_it():
    node = bare_node()
    node.netdevs["tb1"] = object()      # one "tb" device: the driver picks tb1, which is taken -- fails late
    before = snapshot(node)
    with pytest.raises(OSError) as ei:
        node.modules.insmod("tb2")
    assert ei.value.errno == errno.EEXIST
    assert snapshot(node) == before and node.pci_devices[0].driver is None


def test_bring_up_failing_for_want_of_an_irq_line_unwinds_dp_and_the_card():
    node = bare_node()
    node.modules.insmod("tb2")
    for line in range(3, 16):
        node.irq.request_irq(line, lambda pending: iter(()), f"other{line}")
    before = snapshot(node)
    with pytest.raises(OSError) as ei:
        node.modules.insmod("dp")
    assert ei.value.errno == errno.EBUSY
    assert snapshot(node) == before
    assert adapter(node).owner is None and not node.netdevs["tb0"].protocols
