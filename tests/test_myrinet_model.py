"""The LANai board and the Myrinet network: engines at their rates, PIO, routes,
switches, CRC, flow control, fault injection, and garbage from the wire."""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelsim import WouldBlock
from libdp import Cluster
from nic_drivers.myrinet import _model as hw
from nic_drivers.myrinet.fabric import chain_placement

TEST_PROTO = 0x88B7


def cluster(nodes=2, platform="ppro200_lanai4", params=(), seed=0, **driver):
    c = Cluster(nodes=nodes, platform=platform, nic="myrinet", params=params, seed=seed)
    if driver:
        for n in c.nodes:
            n.modules.rmmod("dp")
            n.modules.rmmod("myrinet")
            n.modules.insmod("myrinet", **driver)
    return c


def collector(node):
    """Register a link protocol on the node's Myrinet device that keeps what arrives."""
    got = []

    def handler(dev, addr, length):
        got.append(dev.node.mem.read(addr, length))
        return 0.0
        yield  # pragma: no cover

    node.netdevs["myri0"].add_protocol(TEST_PROTO, handler)
    return got


def wait_sync(node, queue):
    woken = []
    queue.add(lambda: woken.append(True))
    while not woken:
        assert node.engine.step(), "modeled deadlock"


def send_frames(node, dst, payloads, proto=TEST_PROTO):
    """Send each payload as one frame through the driver, as a kernel path would."""
    dev = node.netdevs["myri0"]

    def path(data):
        buf = dev.tx_reserve()
        dev.write_link_header(buf, dst, proto)
        node.mem.write(buf + dev.link_header_bytes, data)
        yield from dev.tx_commit_path(len(data), 0.0)

    for data in payloads:
        while True:
            try:
                node.run_now(path(data))
                break
            except WouldBlock as wb:
                wait_sync(node, wb.queue)


# --------------------------------------------------------------------------- engines at their rates


@pytest.mark.parametrize("platform,peak", [("ppro200_lanai4", 127.2e6), ("p3_1000_lanai9", 254.3e6)])
def test_host_dma_runs_at_the_pci_peak(platform, peak):
    """LCI-A17/A18: one 512 KB host DMA through the board's engine, timed by the model."""
    c = cluster(platform=platform)
    node = c.nodes[0]
    ni = node.pci_devices[0]
    n = 512 * 1024
    host = node.mem.alloc(n)
    done = []
    t0 = node.engine.now
    ni.host_dma(True, host, ni.sram_bytes - n, n, lambda _: done.append(node.engine.now), None)
    while not done:
        assert node.engine.step()
    assert n / (done[0] - t0) == pytest.approx(peak, rel=1e-3)


def test_pio_write_on_p3_runs_at_about_120_mbytes_per_s():
    """LCI-A47: host -> NI PIO with write-combining, 64-bit/33 MHz PCI, about 120 MB/s."""
    c = cluster(platform="p3_1000_lanai9")
    node = c.nodes[0]
    dev = node.netdevs["myri0"]
    data = bytes(range(256)) * 256
    t0 = node.engine.now
    node.run_now(dev.pio_path(dev.fw.send_buffer(0), data))
    rate = len(data) / (node.engine.now - t0)
    assert rate == pytest.approx(120e6, rel=0.03)
    assert dev.dev.read(dev.fw.send_buffer(0), len(data)) == data


def test_pio_is_slower_on_32_bit_pci_and_bursts_count():
    ppro = cluster().nodes[0].pci_devices[0]
    p3 = cluster(platform="p3_1000_lanai9").nodes[0].pci_devices[0]
    assert ppro.pio_time(4096) > 1.4 * p3.pio_time(4096)
    assert ppro.pio_time(33) > ppro.pio_time(32)          # a 33rd byte is another burst
    assert ppro.pio_time(32) == ppro.pio_time(29)                # data phases are 4 bytes wide
    assert ppro.pio_time(29) == pytest.approx(ppro.pio_time(28) + 1 / 33.33e6)


def test_link_and_switch_timing_of_one_packet():
    """A frame's one-way time grows by one switch delay plus one cable per added hop."""
    def one_way(hops):
        c = cluster(params=[("switch.topology", "chain"), ("switch.hops", hops)])
        got = collector(c.nodes[1])
        t0 = c.engine.now
        send_frames(c.nodes[0], 1, [b"x" * 1000])
        c.engine.run()
        assert got == [b"x" * 1000]
        return c.nodes[1].pci_devices[0], c.medium
    ni1, fab1 = one_way(1)
    ni3, fab3 = one_way(3)
    assert fab1.stats()["delivered"] == fab3.stats()["delivered"] == 1
    # route 1 + type/protocol 4 + payload 1000 + CRC 1 bytes at 160 MB/s, plus the cable
    # the head crosses before the NI takes it
    links = fab1.stats()["links"]
    assert links["sw0->n1"]["busy_us"] == pytest.approx((1 + 4 + 1000 + 1) / 160e6 * 1e6 + 0.05, rel=1e-6)


# --------------------------------------------------------------------------- routes and switches


def test_the_mapper_writes_source_routes_one_byte_per_hop():
    c = cluster(nodes=5, params=[("switch.topology", "chain"), ("switch.hops", 3)])
    tables = [n.pci_devices[0].route_table for n in c.nodes]
    for src, table in enumerate(tables):
        assert set(table) == set(range(5))
        for dst, route in table.items():
            assert route and all(b & 0x80 for b in route)
    assert len(tables[0][4]) == 3                   # first and last node: three switches apart
    assert chain_placement(5, 3, 8) == [0, 0, 1, 2, 2]


def test_routes_carry_frames_between_every_pair():
    c = cluster(nodes=5, params=[("switch.topology", "chain"), ("switch.hops", 3)])
    got = [collector(n) for n in c.nodes]
    for src in range(5):
        send_frames(c.nodes[src], (src + 2) % 5, [f"from {src}".encode()])
    c.engine.run()
    for dst in range(5):
        assert got[dst] == [f"from {(dst - 2) % 5}".encode()]
    assert c.medium.stats()["dropped"] == 0


def test_a_bad_route_is_dropped_by_the_switch_and_counted():
    c = cluster()
    ni0 = c.nodes[0].pci_devices[0]
    c.medium.inject(ni0, bytes([0x80 | 5, 0x0D, 0xB5, 0x88, 0xB7, 1, 2, 3]), "token")   # port 5: no cable
    c.medium.inject(ni0, bytes([0x0D, 0xB5, 0x88, 0xB7]), "token")                        # no route byte
    c.engine.run()
    assert c.medium.stats()["misrouted"] == 2 and c.medium.stats()["dropped"] == 2


def test_output_port_contention_makes_packets_wait_not_drop():
    """Two senders to one receiver share its link: the second head waits for the port."""
    c = cluster(nodes=3)
    got = collector(c.nodes[1])

    def burst(n):
        node = c.nodes[n]
        dev = node.netdevs["myri0"]
        for i in range(8):
            buf = dev.tx_reserve()
            dev.write_link_header(buf, 1, TEST_PROTO)
            node.mem.write(buf + dev.link_header_bytes, bytes([n, i]) * 1000)
            yield from dev.tx_commit_path(2000, 0.0)

    for n in (0, 2):
        c.nodes[n].cpu.submit(1, burst(n), lambda v, e: None)
    c.engine.run()
    assert sorted(got) == sorted(bytes([n, i]) * 1000 for n in (0, 2) for i in range(8))
    link = c.medium.stats()["links"]["sw0->n1"]
    assert link["waits"] > 0 and link["wait_us"] > 0
    assert c.medium.stats()["dropped"] == 0
    # from each sender in order
    for n in (0, 2):
        mine = [g for g in got if g[0] == n]
        assert mine == [bytes([n, i]) * 1000 for i in range(8)]


# --------------------------------------------------------------------------- flow control


def test_back_pressure_holds_packets_in_the_network_and_loses_none():
    """The receiver does not poll: its ring, then its SRAM buffers fill, its receive DMA
    stays unarmed, the network holds the next packet and the sender's ring fills. When
    the receiver drains, every frame arrives, in order."""
    c = cluster(rx_mode="poll", rx_ring=8, abandon_ms=0.0)   # the host is slow, never deemed gone
    got = collector(c.nodes[1])
    ni1 = c.nodes[1].pci_devices[0]
    nbuf = c.nodes[1].netdevs["myri0"].fw.stats()["rx_buffers"]
    total = nbuf + 8 + 16 + 40                       # more than ring, SRAM and sender can hold
    frames = [i.to_bytes(4, "big") * 900 for i in range(total)]
    sender = c.nodes[0]
    dev0 = sender.netdevs["myri0"]
    sent = []

    def pump():
        while len(sent) < total:
            buf = dev0.tx_reserve()
            dev0.write_link_header(buf, 1, TEST_PROTO)
            sender.mem.write(buf + dev0.link_header_bytes, frames[len(sent)])
            yield from dev0.tx_commit_path(3600, 0.0)
            sent.append(1)

    def run_pump():
        """Send until done (True) or until nothing can free the sender's ring (False)."""
        while len(sent) < total:
            try:
                sender.run_now(pump())
            except WouldBlock as wb:
                woken = []
                waiter = lambda: woken.append(True)  # noqa: E731
                wb.queue.add(waiter)
                while not woken:
                    if not c.engine.step():
                        wb.queue.discard(waiter)
                        return False
        return True

    assert not run_pump()                           # stuck: the network holds the sender back
    assert got == [] and not ni1.rx_armed and ni1.stats()["recv_dma"]["blocked_heads"] >= 1
    assert dev0.stats()["tx_ring_full"] >= 1 and dev0.stats()["tx_queued"] == 16
    dev1 = c.nodes[1].netdevs["myri0"]
    for _ in range(10 * total):
        c.nodes[1].run_now(dev1.poll_path())
        c.engine.run()
        if len(sent) < total:
            run_pump()
        if len(got) == total:
            break
    assert got == frames
    st_ = c.medium.stats()
    assert st_["dropped"] == 0 and st_["ni_wait_us"] > 0
    hw1 = ni1.stats()["recv_dma"]
    assert hw1["no_buffer"] == 0 and hw1["crc_errors"] == 0 and hw1["halted_drops"] == 0


def test_a_ring_nobody_drains_is_abandoned_and_the_ni_hears_again():
    """Bulk packets nobody receives (no EPOS receiver) fill the bulk ring, then every SRAM
    buffer: the NI is deaf. After abandon_ms without the host consuming, the firmware
    drops what that ring holds (counted) and DP traffic flows again."""
    from nic_drivers.myrinet.firmware import BULK_PROTO
    c = cluster(abandon_ms=5.0)
    for n in c.nodes:
        n.modules.insmod("dp")
    ni1 = c.nodes[1].pci_devices[0]
    fw = c.nodes[1].netdevs["myri0"].fw
    nbuf = fw.stats()["rx_buffers"]
    junk = (0x0DB5).to_bytes(2, "big") + BULK_PROTO.to_bytes(2, "big") + bytes(100)
    for _ in range(nbuf + 40):
        ni1.rx_frame(junk, True)
        c.engine.run(until=c.engine.now + 20e-6)
    st = fw.stats()
    assert st["free_rx_buffers"] == 0 and st["bulk_ring_held"] > 0 and st["dropped_abandoned"] == 0
    a, b = c.process(0).sync, c.process(1).sync
    fa, fb = a.dp_open(3), b.dp_open(3)
    a.dp_target(fa, 1, 3)
    a.dp_write(fa, b"through")
    assert b.dp_read(fb) == b"through"             # once the bulk ring was given up,
    assert c.engine.now >= 5e-3                    # abandon_ms after it began to hold
    st = fw.stats()
    assert st["dropped_abandoned"] == st["held"] and st["bulk_ring_held"] == 0


def test_a_slow_ring_that_consumes_is_not_abandoned():
    """The watch restarts as long as the host consumes something: a slow reader keeps its
    packets however long it takes (the late-receiver test of the pipeline relies on it)."""
    c = cluster(abandon_ms=0.5, rx_mode="poll", rx_ring=8)
    got = collector(c.nodes[1])
    fw = c.nodes[1].netdevs["myri0"].fw
    sender = c.nodes[0]
    dev0 = sender.netdevs["myri0"]
    dev1 = c.nodes[1].netdevs["myri0"]
    total = 60

    sent = []

    def pump_from(k):
        for i in range(k, total):
            buf = dev0.tx_reserve()
            dev0.write_link_header(buf, 1, TEST_PROTO)
            sender.mem.write(buf + dev0.link_header_bytes, i.to_bytes(4, "big"))
            yield from dev0.tx_commit_path(4, 0.0)
            sent.append(i)

    for _ in range(10 * total):                      # one poll every 0.3 ms: slow, but alive
        if len(sent) < total:
            try:
                sender.run_now(pump_from(len(sent)))
            except WouldBlock:
                pass
        c.engine.run(until=c.engine.now + 0.3e-3)
        c.nodes[1].run_now(dev1.poll_path())
        if len(got) == total:
            break
    assert c.engine.now > 4 * 0.5e-3                 # several abandon_ms in all
    assert [int.from_bytes(g, "big") for g in got] == list(range(total))
    assert fw.stats()["dropped_abandoned"] == 0


# --------------------------------------------------------------------------- CRC and faults


def test_corrupted_packets_fail_the_crc_are_dropped_and_counted():
    c = cluster(params=[("fault.corrupt", 0.3)], seed=5)
    got = collector(c.nodes[1])
    frames = [bytes([i]) * 200 for i in range(100)]
    send_frames(c.nodes[0], 1, frames)
    c.engine.run()
    corrupted = c.medium.faults.corrupted
    ni1 = c.nodes[1].pci_devices[0]
    assert 10 < corrupted < 50
    assert ni1.stats()["recv_dma"]["crc_errors"] == corrupted
    assert len(got) == 100 - corrupted
    assert all(g in frames for g in got)           # nothing damaged reached the host
    assert got == [f for f in frames if f in got]  # order kept


def test_loss_duplication_and_reordering_are_injected_and_seeded():
    def run(seed):
        c = cluster(params=[("fault.loss", 0.1), ("fault.duplicate", 0.1), ("fault.reorder", 0.1)], seed=seed)
        got = collector(c.nodes[1])
        send_frames(c.nodes[0], 1, [i.to_bytes(2, "big") * 50 for i in range(200)])
        c.engine.run()
        return got, c.medium.faults.stats()
    got, faults = run(3)
    assert faults["lost"] > 0 and faults["duplicated"] > 0 and faults["reordered"] > 0
    seq = [int.from_bytes(g[:2], "big") for g in got]
    assert len(seq) == 200 - faults["lost"] + faults["duplicated"]
    assert seq != sorted(seq)                      # held-back packets let later ones pass
    assert run(3) == (got, faults)
    assert run(4)[0] != got


def test_a_halted_board_swallows_traffic_instead_of_blocking_the_network():
    c = cluster()
    n1 = c.nodes[1]
    n1.modules.rmmod("dp")
    n1.modules.rmmod("myrinet")
    send_frames(c.nodes[0], 1, [b"z" * 500] * 5)
    c.engine.run()
    assert n1.pci_devices[0].stats()["recv_dma"]["halted_drops"] == 5
    assert c.nodes[0].netdevs["myri0"].dev.stats()["send_dma"]["packets"] == 5


# --------------------------------------------------------------------------- garbage from the wire


_GARBAGE = cluster()
_GARBAGE_NI = _GARBAGE.nodes[1].pci_devices[0]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(
    st.binary(max_size=64),
    st.binary(min_size=4, max_size=64).map(lambda b: b"\x0d\xb5\x88\xb5" + b),     # DP type and protocol
    st.binary(min_size=20, max_size=64).map(lambda b: b"\x0d\xb5\x88\xb6" + b),    # bulk protocol
    st.binary(min_size=4096, max_size=5000)), max_size=6), st.booleans())
def test_random_bytes_into_the_receive_entry_never_raise(frames, crc_ok):
    node = _GARBAGE.nodes[1]
    for f in frames:
        _GARBAGE_NI.rx_frame(f, crc_ok)
        _GARBAGE.engine.run()                    # firmware, DMA, interrupt path, MDR
    while True:                                  # the bulk receiver reads what reached its ring
        try:
            node.run_now(node.netdevs["myri0"].bulk_recv_op().path())
        except WouldBlock:
            break
        _GARBAGE.engine.run()
    _GARBAGE.engine.run()
    assert _GARBAGE_NI.fw_faults == 0, _GARBAGE_NI.last_fault
    assert _GARBAGE_NI.dma_errors == 0


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300))
def test_random_packets_into_the_network_never_raise(data):
    ni0 = _GARBAGE.nodes[0].pci_devices[0]
    _GARBAGE.medium.inject(ni0, data, None)
    _GARBAGE.engine.run()
    assert _GARBAGE_NI.fw_faults == 0, _GARBAGE_NI.last_fault


def test_garbage_did_not_break_the_board():
    """After the fuzzing above, DP still goes through on the same cluster."""
    from libdp import pingpong
    rows = _GARBAGE.run_spmd(pingpong, [1, 100], 5)[0]
    assert rows[0]["rtt_us"] > 0


def test_interrupt_line_follows_isr_and_mask():
    c = cluster()
    ni = c.nodes[0].pci_devices[0]
    seen = []
    old = ni.irq_sink
    ni.irq_sink = seen.append
    ni.csr_write(hw.REG_EIMR, 0)
    ni.raise_host(hw.ISR_RX)
    assert seen == []
    ni.csr_write(hw.REG_EIMR, hw.ISR_RX)
    assert seen == [True]
    ni.csr_write(hw.REG_ISR, hw.ISR_RX)               # write 1 to clear
    assert seen == [True, False] and ni.csr_read(hw.REG_ISR) == 0
    ni.irq_sink = old
    assert ni.csr_read(hw.REG_VERSION) == 0x0401


def test_random_data_round_trips_through_sram_by_pio_and_dma():
    c = cluster(pio_max=256)
    got = collector(c.nodes[1])
    rng = random.Random(1)
    frames = [rng.randbytes(n) for n in (1, 100, 251, 252, 300, 2000, 4196)]
    send_frames(c.nodes[0], 1, frames)
    c.engine.run()
    assert got == frames
    dev0 = c.nodes[0].netdevs["myri0"]
    # frames of at most 256 bytes on the wire go by PIO (route 1 + type/proto 4 + payload)
    assert dev0.tx_pio == 3 and dev0.tx_dma == 4


# --------------------------------------------------------------------------- the NI processor

class _Recorder:
    """A Python control program: one generator handler per post, each spending 3 cycles."""
    name = "recorder"

    def __init__(self):
        self.ran = []
        self.ni = None

    def attach(self, ni):
        self.ni = ni

    def detach(self, ni):
        self.ni = None

    def start(self, ni):
        for i in range(40):                      # more than the processor queue first holds
            ni.post(self.work, i)
        return None

    def work(self, i):
        self.ran.append((i, self.ni.rtc()))
        yield 3


def test_processor_runs_forty_queued_handlers_in_order_one_after_the_other():
    c = cluster()
    n = c.nodes[0]
    n.modules.rmmod("dp")
    n.modules.rmmod("myrinet")
    ni = n.pci_devices[0]
    fw = _Recorder()
    ni.load_firmware(fw)
    events0 = ni.ni_events
    ni.csr_write(hw.REG_CTRL, hw.CTRL_RUN)
    c.engine.run()
    assert [i for i, _ in fw.ran] == list(range(40))
    starts = [t for _, t in fw.ran]
    assert all(b - a == pytest.approx(3 * ni.cycle_s) for a, b in zip(starts, starts[1:]))
    assert ni.ni_events - events0 == 41 and ni.ni_cycles == 120     # start() and the 40 handlers


def test_dp_control_program_handlers_are_typed_paths_python_can_still_drive():
    """DP's handlers are NiHandlers whose runs are Paths: from Python a handler is still a
    call giving an iterator of NI cycles (what a wrapper around on_packet relies on), and
    `counters` is a dict of what the program counted."""
    c = cluster()
    a, b = c.nodes
    got = collector(b)
    fw_a, fw_b = a.netdevs["myri0"].fw, b.netdevs["myri0"].fw
    run = fw_a.on_tx_wait(0)
    assert next(run) == fw_a.c_poll                # the poll's cycles, then it looks at the word
    with pytest.raises(StopIteration):
        next(run)
    send_frames(a, 1, [b"one", b"two"])
    c.engine.run()
    assert got == [b"one", b"two"]
    sent, received = fw_a.counters, fw_b.counters
    assert isinstance(sent, dict) and (sent["sent"], sent["sent_pio"], sent["received"]) == (2, 2, 0)
    assert (received["received"], received["to_kernel"], received["to_bulk"]) == (2, 2, 0)
    # every buffer back: one armed in the receive engine, the rest free
    assert fw_b.stats()["free_rx_buffers"] == len(fw_b.rx_buffers) - 1 and b.pci_devices[0].rx_armed
