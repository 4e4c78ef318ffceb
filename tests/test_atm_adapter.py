"""The PCA-200E-style adapter and its driver, below DP's figures.

Cells are fed straight into a card's receive entry (`rx_frame`, what a medium or a real
transport calls), so each check of the receive side -- HEC, connection lookup, AAL5
length and CRC-32, reassembly limits, buffer supply -- is hit exactly. The driver is
exercised as a module: loaded, unloaded, failing half-way.
"""
from __future__ import annotations

import errno

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dpcore._codec import dm_pack
from dpcore._services import DP_ETHERTYPE
from libdp import Cluster
from nic_drivers import atm
from nic_drivers.atm import _model as hw

RX_VCI = 33          # back to back, node 1 receives on its own VCI (32 + 1)


def cluster(**kw):
    c = Cluster(nodes=2, nic="atm", **kw)
    c.engine.run()                    # the cards take the buffers supplied at load
    return c


def reload(c, **params):
    for n in c.nodes:
        n.modules.rmmod("dp")
        n.modules.rmmod("atm")
        n.modules.insmod("atm", **params)
        n.modules.insmod("dp")
    c.engine.run()


def card(c, nid=1):
    return c.nodes[nid].pci_devices[0]


def dp_payload(data: bytes, dst_ep=9, src_nid=0, src_ep=9, proto=DP_ETHERTYPE) -> bytes:
    buf = bytearray(10 + len(data))
    buf[0:2] = proto.to_bytes(2, "big")
    dm_pack(buf, 2, dst_ep, src_nid, src_ep, 0, len(data))
    buf[10:] = data
    return bytes(buf)


def inject(c, cells: bytes, nid=1):
    card(c, nid).rx_frame(cells, True)
    c.engine.run()


def open_ep(c, nid=1, ep=9):
    dp = c.process(nid)
    return dp, dp.sync.dp_open(ep)


def read_all(dp, fd):
    dp.sync.set_blocking(fd, False)
    out = []
    try:
        while True:
            out.append(dp.sync.dp_read(fd))
    except BlockingIOError:
        return out


# --------------------------------------------------------------------------- receive checks


def test_a_good_pdu_reaches_the_endpoint_intact():
    c = cluster()
    dp, fd = open_ep(c)
    data = bytes(range(256)) * 3                          # 768 bytes: small + large buffer
    inject(c, hw.aal5_cells(0, RX_VCI, dp_payload(data)))
    assert read_all(dp, fd) == [data]
    st_ = card(c).stats()
    assert st_["aal5"]["pdus_received"] == 1 and st_["aal5"]["crc_errors"] == 0
    assert c.nodes[1].netdevs["atm0"].rx_joined == 1         # 384 + 394 bytes joined in the headroom


def test_a_bit_flipped_in_a_header_is_caught_by_the_hec():
    c = cluster()
    dp, fd = open_ep(c)
    cells = bytearray(hw.aal5_cells(0, RX_VCI, dp_payload(b"x" * 100)))
    cells[53 + 2] ^= 0x10                                 # second cell's VCI
    inject(c, bytes(cells))
    s = card(c).stats()
    assert s["phy"]["hec_errors"] == 1
    assert s["aal5"]["pdus_received"] == 0 and s["aal5"]["protocol_errors"] == 1   # one cell short
    assert read_all(dp, fd) == []


@pytest.mark.parametrize("where", [5, 30, 52, 53 + 5 + 20, 2 * 53 + 5 + 44])   # payload, pad, trailer
def test_a_bit_flipped_in_a_payload_is_caught_by_the_crc(where):
    c = cluster()
    dp, fd = open_ep(c)
    cells = bytearray(hw.aal5_cells(0, RX_VCI, dp_payload(b"y" * 100)))
    assert len(cells) == 3 * 53
    cells[where] ^= 0x01
    inject(c, bytes(cells))
    s = card(c).stats()
    assert s["aal5"]["crc_errors"] + s["aal5"]["protocol_errors"] == 1
    assert s["aal5"]["pdus_received"] == 0 and read_all(dp, fd) == []


def test_a_lost_last_cell_takes_the_next_pdu_with_it_and_no_more():
    c = cluster()
    dp, fd = open_ep(c)
    first = hw.aal5_cells(0, RX_VCI, dp_payload(b"1" * 100))
    second = hw.aal5_cells(0, RX_VCI, dp_payload(b"2" * 100))
    third = hw.aal5_cells(0, RX_VCI, dp_payload(b"3" * 100))
    inject(c, first[:-53] + second + third)
    assert read_all(dp, fd) == [b"3" * 100]
    s = card(c).stats()["aal5"]
    assert s["pdus_received"] == 1 and s["protocol_errors"] + s["crc_errors"] == 1


def test_a_duplicated_cell_is_caught():
    c = cluster()
    dp, fd = open_ep(c)
    cells = hw.aal5_cells(0, RX_VCI, dp_payload(b"d" * 100))
    inject(c, cells[:53] + cells)
    assert read_all(dp, fd) == []
    s = card(c).stats()["aal5"]
    assert s["protocol_errors"] + s["crc_errors"] == 1


def test_a_pdu_beyond_the_mtu_is_discarded_up_to_its_last_cell():
    c = cluster()
    dp, fd = open_ep(c)
    runaway = hw.aal5_cells(0, RX_VCI, bytes(3000))          # longer than the 1536-byte MTU
    good = hw.aal5_cells(0, RX_VCI, dp_payload(b"ok"))
    inject(c, runaway + good)
    assert read_all(dp, fd) == [b"ok"]
    s = card(c).stats()["aal5"]
    assert s["too_long"] == 1 and s["cells_dropped"] == len(runaway) // 53


@pytest.mark.parametrize("header,counter", [
    (hw.cell_header(0, 0, 0, 1), ("phy", "idle_cells")),
    (hw.cell_header(0, RX_VCI, 4), ("atm", "oam_cells")),
    (hw.cell_header(1, RX_VCI), ("atm", "vpi_bad_range")),
    (hw.cell_header(0, 1024), ("atm", "vci_bad_range")),
    (hw.cell_header(0, 77), ("atm", "vci_no_conn")),
])
def test_cells_that_belong_to_no_open_connection_are_counted(header, counter):
    c = cluster()
    inject(c, header + bytes(48))
    group, key = counter
    assert card(c).stats()[group][key] == 1
    assert card(c).stats()["atm"]["cells_received"] == 0


def test_runt_frames_from_a_transport_are_counted():
    c = cluster()
    inject(c, hw.cell_header(0, RX_VCI) + bytes(20))
    inject(c, b"")
    assert card(c).stats()["phy"]["runts"] == 2


def test_no_receive_buffers_drops_and_counts_until_the_driver_resupplies():
    c = cluster()
    reload(c, small_buffers=16, supply_block=8)
    dp, fd = open_ep(c)
    nd = c.nodes[1].netdevs["atm0"]
    cells = hw.aal5_cells(0, RX_VCI, dp_payload(b"z"))
    assert card(c).free_buffers() == (16, nd.nlarge)
    # No interrupt handler runs while the engine is held: the card uses up its small buffers.
    for _ in range(16 + 3):
        card(c).rx_frame(cells, True)
    assert card(c).stats()["aux"]["small_buffer_failed"] == 3
    c.engine.run()
    assert len(read_all(dp, fd)) == 16
    assert card(c).free_buffers() == (16, nd.nlarge)         # the driver gave every one back
    inject(c, cells)
    assert read_all(dp, fd) == [b"z"]


def test_no_receive_descriptor_drops_and_counts():
    c = cluster()
    dp, fd = open_ep(c)
    cells = hw.aal5_cells(0, RX_VCI, dp_payload(b"r"))
    n = card(c).rxq_len
    for _ in range(n + 2):
        card(c).rx_frame(cells, True)
    assert card(c).stats()["aux"]["rpd_failed"] == 2
    c.engine.run()
    assert len(read_all(dp, fd)) == n


def test_an_unknown_link_protocol_is_dropped_by_the_driver():
    c = cluster()
    inject(c, hw.aal5_cells(0, RX_VCI, dp_payload(b"q", proto=0x0800)))
    nd = c.nodes[1].netdevs["atm0"]
    assert nd.stats()["rx_dropped_unknown_protocol"] == 1


def test_llc_snap_encapsulation_is_checked():
    c = cluster()
    reload(c, encap="llc")
    dp, fd = open_ep(c)
    body = dp_payload(b"snap")[2:]
    inject(c, hw.aal5_cells(0, RX_VCI, bytes([0xAA, 0xAA, 3, 0, 0, 0, 0x88, 0xB5]) + body))
    inject(c, hw.aal5_cells(0, RX_VCI, bytes([0xAA, 0xAA, 3, 0, 0, 1, 0x88, 0xB5]) + body))   # foreign OUI
    assert read_all(dp, fd) == [b"snap"]
    assert c.nodes[1].netdevs["atm0"].rx_errors == 1


# --------------------------------------------------------------------------- bad input never raises


def _valid_cell(vci, pti, payload):
    return hw.cell_header(0, vci, pti) + payload


cell_stream = st.lists(st.one_of(
    st.binary(max_size=200),                                                   # line noise
    st.builds(_valid_cell, st.sampled_from([32, 33, 34, 1023]), st.integers(0, 7),
              st.binary(min_size=48, max_size=48)),                            # good headers, junk payload
    st.builds(lambda p, n: hw.aal5_cells(0, RX_VCI, p)[: 53 * n],              # truncated PDUs
              st.binary(max_size=1600), st.integers(0, 40)),
    st.builds(lambda p: hw.aal5_cells(0, RX_VCI, p), st.binary(max_size=1600)),   # whole PDUs, junk inside
), max_size=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(cell_stream)
def test_random_bytes_into_the_receive_entry_never_raise(rx_cluster, frames):
    c = rx_cluster
    dev = card(c)
    before = dev.stats()["phy"]["cells_in"]
    for f in frames:
        dev.rx_frame(f, True)
    c.engine.run()                              # the driver and DP see whatever got through
    assert dev.stats()["phy"]["cells_in"] == before + sum(len(f) // 53 for f in frames)
    nd = c.nodes[1].netdevs["atm0"]
    assert nd.stats()["tx_queued"] == 0


@pytest.fixture(scope="module")
def rx_cluster():
    c = cluster()
    open_ep(c)
    return c


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 0x1200).map(lambda x: x & ~3), st.integers(0, 0xFFFFFFFF)), max_size=30))
def test_random_register_and_queue_writes_never_raise(writes):
    c = cluster()
    dev = card(c, 0)
    for off, value in writes:
        if off == hw.REG_HCR:
            value &= ~hw.HCR_RESET               # a reset is legal, just not interesting here
        dev.reg_write(off, value)
        dev.reg_read(off)
    c.engine.run()


# --------------------------------------------------------------------------- the driver as a module


def _snapshot(node):
    return (node.mem.in_use(), sorted(node.netdevs), node.irq.stats(), [m["name"] for m in node.modules.lsmod()])


def test_a_bad_parameter_leaves_the_kernel_as_it_was():
    c = cluster()
    node = c.nodes[0]
    node.modules.rmmod("dp")
    node.modules.rmmod("atm")
    before = _snapshot(node)
    for bad in ({"mtu": 10}, {"encap": "ppp"}, {"supply_block": 0}, {"queues": 3}):
        with pytest.raises(OSError) as exc:
            node.modules.insmod("atm", **bad)
        assert exc.value.errno == errno.EINVAL
        assert _snapshot(node) == before
    # A combination only the card's geometry can refuse is found at probe, after the reset.
    with pytest.raises(OSError) as exc:
        node.modules.insmod("atm", small_buffers=4096, supply_block=4)
    assert exc.value.errno == errno.EINVAL and _snapshot(node) == before
    assert card(c, 0).driver is None


def test_a_card_that_fails_its_self_test_leaves_the_kernel_as_it_was():
    c = cluster()
    node = c.nodes[0]
    node.modules.rmmod("dp")
    node.modules.rmmod("atm")
    before = _snapshot(node)
    card(c, 0).fail_selftest = True
    with pytest.raises(OSError) as exc:
        node.modules.insmod("atm")
    assert exc.value.errno == errno.EIO
    assert _snapshot(node) == before and card(c, 0).driver is None
    card(c, 0).fail_selftest = False
    node.modules.insmod("atm")
    assert "atm0" in node.netdevs


def test_a_vc_the_card_refuses_unwinds_everything_taken_before_it():
    c = cluster()
    node = c.nodes[0]
    node.modules.rmmod("dp")
    node.modules.rmmod("atm")
    before = _snapshot(node)
    node.hosts = dict(node.hosts)
    node.hosts[2000] = {"atm": atm.hwaddr_for(2000)}         # VCI 2032: beyond the card's 10 bits
    with pytest.raises(OSError) as exc:
        node.modules.insmod("atm")
    assert exc.value.errno == errno.EINVAL and "2032" in str(exc.value)
    assert _snapshot(node) == before
    assert card(c, 0).vc_state(32) == (0, 0) and card(c, 0).vc_state(33) == (0, 0)
    assert not any(ln["handlers"] for ln in node.irq.stats().values())


def test_no_card_no_driver():
    c = cluster()
    node = c.nodes[0]
    node.modules.rmmod("dp")
    node.modules.rmmod("atm")
    node.pci_devices.clear()
    with pytest.raises(OSError) as exc:
        node.modules.insmod("atm")
    assert exc.value.errno == errno.ENODEV


def test_unload_and_reload():
    c = cluster()
    node = c.nodes[1]
    with pytest.raises(OSError) as exc:
        node.modules.rmmod("atm")                           # DP rides on it
    assert exc.value.errno == errno.EBUSY
    node.modules.rmmod("dp")
    base = node.mem.in_use()
    node.modules.rmmod("atm")
    assert node.mem.in_use() < base and "atm0" not in node.netdevs
    assert card(c).vc_state(RX_VCI) == (0, 0) and card(c).driver is None
    assert not any(ln["handlers"] for ln in node.irq.stats().values())
    inject(c, hw.aal5_cells(0, RX_VCI, dp_payload(b"gone")))
    assert card(c).stats()["atm"]["vci_no_conn"] >= 1
    node.modules.insmod("atm")
    node.modules.insmod("dp")
    assert node.mem.in_use() == base
    dp, fd = open_ep(c)
    inject(c, hw.aal5_cells(0, RX_VCI, dp_payload(b"back")))
    assert read_all(dp, fd) == [b"back"]


def test_vcs_follow_the_address_plan():
    c = cluster()
    assert atm.hwaddr_for(5) == (0, 37)
    for nid in (0, 1):
        nd = c.nodes[nid].netdevs["atm0"]
        peer = 1 - nid
        assert nd.vcs_out == [atm.hwaddr_for(peer)]
        assert sorted(nd.vcs_in) == [atm.hwaddr_for(0), atm.hwaddr_for(1)]
        assert card(c, nid).vc_state(32 + peer)[1] == 1536
    assert c.nodes[0].services["dp"].max_message == 1500


# --------------------------------------------------------------------------- transmit side


def test_a_real_transport_carries_each_pdu_as_one_train_of_cells():
    c = cluster()
    sent = []

    class Transport:                      # what kernelsim.media.backend.DevicePort offers
        def transmit(self, frame, t):
            sent.append(bytes(frame))
            return t, t

    card(c, 0).port = Transport()
    dp1, fd1 = open_ep(c, 1)
    dp0, fd0 = open_ep(c, 0)
    dp0.sync.dp_target(fd0, 1, 9)
    dp0.sync.dp_write(fd0, b"train" * 30)
    c.engine.run()
    assert sent == [hw.aal5_cells(0, RX_VCI, dp_payload(b"train" * 30))]
    assert len(sent[0]) == 4 * 53
    inject(c, sent[0])
    assert read_all(dp1, fd1) == [b"train" * 30]


def test_the_card_refuses_a_pdu_for_a_vc_it_never_opened():
    c = cluster()
    node = c.nodes[0]
    nd = node.netdevs["atm0"]
    buf = nd.tx_reserve()
    nd.write_link_header(buf, (0, 99), DP_ETHERTYPE)
    node.run_now(nd.tx_commit_path(20))
    c.engine.run()
    assert card(c, 0).stats()["aal5"]["tx_errors"] == 1
    assert card(c, 0).stats()["atm"]["cells_transmitted"] == 0
    assert nd._tx_reclaim() >= 0 and nd.tx_errors == 1 and nd.stats()["tx_queued"] == 0
