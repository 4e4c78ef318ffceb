"""What LCI asks of the shared LANai board model: a control program may hear of packets
the hardware CRC check rejected (LCI-C03: the base variant aborts on one), and one
that does not ask is left as before."""
from __future__ import annotations

from libdp import Cluster
from nic_drivers.myrinet.firmware import Firmware


class _Listener(Firmware):
    """A control program that arms one buffer and records what the board tells it."""

    name = "listener"

    def __init__(self):
        self.events = []

    def start(self, ni):
        ni.rx_arm(ni.firmware_bytes, 256)

    def on_packet(self, pkt):
        self.events.append(("packet", pkt[1]))
        self.ni.rx_arm(self.ni.firmware_bytes, 256)
        yield 10

    def on_crc_error(self, n):
        self.events.append(("crc", n))
        yield 5


def _boards(seed=0, **faults):
    params = [f"fault.{k}={v}" for k, v in faults.items()]
    c = Cluster(nodes=2, nic="myrinet", params=params, seed=seed)
    for n in c.nodes:
        n.modules.rmmod("dp")
        n.modules.rmmod("myrinet")
    return c, c.nodes[0].pci_devices[0], c.nodes[1].pci_devices[0]


def _run(c, tx, rx, fw, count):
    from nic_drivers.myrinet import _model as hw
    rx.load_firmware(fw)
    rx.csr_write(hw.REG_CTRL, hw.CTRL_RUN)
    tx.load_firmware(Firmware())
    tx.csr_write(hw.REG_CTRL, hw.CTRL_RUN)
    route = tx.route_table[rx.nid]
    frame = route + b"\x0c\x15" + bytes(range(40))
    for i in range(count):
        tx.write(tx.firmware_bytes, frame)
        tx.net_send(tx.firmware_bytes, len(frame))
        while c.engine.step():
            pass


def test_a_corrupted_packet_is_reported_to_a_control_program_that_asks():
    c, tx, rx = _boards(seed=3, corrupt=1.0)
    fw = _Listener()
    _run(c, tx, rx, fw, 3)
    assert fw.events == [("crc", 42)] * 3
    assert rx.rx_crc_errors == 3 and rx.rx_packets == 0
    assert rx.rx_armed                       # the buffer stays armed for the next packet


def test_good_packets_still_go_to_on_packet_and_silent_programs_are_not_told():
    c, tx, rx = _boards()
    fw = _Listener()
    _run(c, tx, rx, fw, 2)
    assert fw.events == [("packet", 42)] * 2

    c, tx, rx = _boards(seed=3, corrupt=1.0)
    plain = Firmware()                       # no on_crc_error: counted by the board only
    plain.start = lambda ni: ni.rx_arm(ni.firmware_bytes, 256)
    before = rx.ni_events
    _run(c, tx, rx, plain, 2)
    assert rx.rx_crc_errors == 2 and rx.ni_events == before + 1      # only its start ran


class _Rebinding(_Listener):
    """Replaces its receive hook as it starts, as LCI's control program does."""

    def start(self, ni):
        super().start(ni)
        self.on_packet = self._heard

    def _heard(self, pkt):
        self.events.append(("rebound", pkt[1]))
        self.ni.rx_arm(self.ni.firmware_bytes, 256)
        yield 10


def test_the_board_posts_the_hook_of_the_program_loaded_now_as_it_is_now():
    """DP's control program was on these boards (its hook is kept on the board): after it is
    unloaded, the board posts the new program's hook, and the hook the program set in start."""
    from nic_drivers.myrinet.firmware import DPFirmware
    c, tx, rx = _boards()
    fw = _Rebinding()
    _run(c, tx, rx, fw, 2)
    assert fw.events == [("rebound", 42)] * 2

    c = Cluster(nodes=2, nic="myrinet")      # DP's own program, its hook replaced while loaded
    rx = c.nodes[1].pci_devices[0]
    assert type(rx.firmware) is DPFirmware
    heard = []
    dp_hook = rx.firmware.on_packet

    def hook(pkt):
        heard.append(pkt[1])
        return dp_hook(pkt)
    rx.firmware.on_packet = hook
    tx = c.nodes[0].pci_devices[0]
    c.medium.inject(tx, tx.route_table[1] + bytes(40), None)
    c.engine.run()
    assert heard == [40]                     # the packet less its route


def test_the_real_time_clock_reads_modeled_time():
    c, tx, rx = _boards()
    from nic_drivers.myrinet import _model as hw
    rx.load_firmware(Firmware())
    rx.csr_write(hw.REG_CTRL, hw.CTRL_RUN)
    start = rx.rtc()
    fired = []
    rx.timer(12.5e-6, lambda _: fired.append(rx.rtc()))
    while c.engine.step():
        pass
    assert fired == [start + 12.5e-6] and rx.rtc() == c.engine.now
