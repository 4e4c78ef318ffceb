"""The Directed Message header codec and the MDR's robustness against any frame.

Frames are fed straight into node 1's DEC 21140 receive path
(``pci_devices[0].rx_frame(frame, crc_ok)``) and the engine is run, so they travel
device -> descriptor ring -> driver interrupt path -> protocol dispatch -> MDR -> TBP.
"""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dpcore import DM_HEADER_BYTES, DM_MAX_LENGTH, DM_MAX_TYPE, DM_TYPE_DATA, DP_ETHERTYPE, dm_pack, dm_unpack
from libdp import Cluster
from nic_drivers.dec21140 import hwaddr_for

U16 = st.integers(0, 0xFFFF)


# --------------------------------------------------------------------------- codec


def test_codec_constants():
    assert DM_HEADER_BYTES == 8
    assert DM_MAX_LENGTH == 0xFFF
    assert DM_MAX_TYPE == 0xF
    assert DM_TYPE_DATA == 0
    assert DP_ETHERTYPE == 0x88B5


@settings(max_examples=300, deadline=None)
@given(off=st.integers(0, 40), dst_ep=U16, src_nid=U16, src_ep=U16, mtype=st.integers(0, DM_MAX_TYPE),
       length=st.integers(0, DM_MAX_LENGTH), extra=st.integers(0, 8), fill=st.integers(0, 255))
def test_codec_round_trip(off, dst_ep, src_nid, src_ep, mtype, length, extra, fill):
    buf = bytearray([fill]) * (off + DM_HEADER_BYTES + length + extra)
    before = bytes(buf)
    dm_pack(buf, off, dst_ep, src_nid, src_ep, mtype, length)
    # Network byte order, type in the top 4 bits of the last word.
    assert bytes(buf[off:off + 8]) == struct.pack(">HHHH", dst_ep, src_nid, src_ep, (mtype << 12) | length)
    assert buf[:off] == before[:off] and buf[off + 8:] == before[off + 8:]     # nothing else touched
    assert dm_unpack(buf, off) == (dst_ep, src_nid, src_ep, mtype, length)
    assert dm_unpack(bytes(buf), off) == (dst_ep, src_nid, src_ep, mtype, length)


@settings(max_examples=100, deadline=None)
@given(length=st.integers(1, DM_MAX_LENGTH), short=st.integers(1, 16))
def test_unpack_refuses_a_header_whose_data_is_not_there(length, short):
    buf = bytearray(DM_HEADER_BYTES + length)
    dm_pack(buf, 0, 1, 2, 3, 0, length)
    cut = bytes(buf[:max(DM_HEADER_BYTES, len(buf) - short)])
    if len(cut) - DM_HEADER_BYTES < length:
        with pytest.raises(ValueError):
            dm_unpack(cut, 0)


_BAD_U16 = st.one_of(st.integers(-(2 ** 31), -1), st.integers(0x10000, 2 ** 31 - 1))


@settings(max_examples=200, deadline=None)
@given(field=st.sampled_from(["dst_ep", "src_nid", "src_ep", "mtype", "length"]), data=st.data())
def test_pack_out_of_range_field_is_valueerror(field, data):
    fields = {"dst_ep": 1, "src_nid": 2, "src_ep": 3, "mtype": 0, "length": 4}
    if field == "mtype":
        bad = data.draw(st.one_of(st.integers(-(2 ** 31), -1), st.integers(DM_MAX_TYPE + 1, 2 ** 31 - 1)))
    elif field == "length":
        bad = data.draw(st.one_of(st.integers(-(2 ** 31), -1), st.integers(DM_MAX_LENGTH + 1, 2 ** 31 - 1)))
    else:
        bad = data.draw(_BAD_U16)
    fields[field] = bad
    buf = bytearray(64)
    with pytest.raises(ValueError):
        dm_pack(buf, 0, fields["dst_ep"], fields["src_nid"], fields["src_ep"], fields["mtype"], fields["length"])
    assert buf == bytearray(64)           # nothing written


def test_pack_huge_field_is_valueerror_too():
    """"ValueError for a field out of range" holds for values beyond a C int as well."""
    wrong = []
    for field in ("dst_ep", "src_nid", "src_ep", "mtype", "length"):
        for value in (2 ** 31, 2 ** 40, -(2 ** 40)):
            fields = {"dst_ep": 1, "src_nid": 2, "src_ep": 3, "mtype": 0, "length": 4}
            fields[field] = value
            try:
                dm_pack(bytearray(64), 0, fields["dst_ep"], fields["src_nid"], fields["src_ep"],
                        fields["mtype"], fields["length"])
            except ValueError:
                continue
            except Exception as exc:       # noqa: BLE001 - reported below
                wrong.append(f"{field}={value}: {type(exc).__name__}")
            else:
                wrong.append(f"{field}={value}: accepted")
    assert wrong == []


@pytest.mark.parametrize("size,off", [(8, -1), (8, 1), (7, 0), (100, 93), (100, 2 ** 20)])
def test_pack_without_room_is_valueerror(size, off):
    buf = bytearray(size)
    with pytest.raises(ValueError):
        dm_pack(buf, off, 1, 2, 3, 0, 0)
    assert buf == bytearray(size)


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=64), off=st.integers(-4, 70))
def test_unpack_arbitrary_bytes_is_a_consistent_tuple_or_valueerror(raw, off):
    try:
        got = dm_unpack(raw, off)
    except ValueError:
        ok = 0 <= off and len(raw) - off >= 8 and \
            (struct.unpack(">H", raw[off + 6:off + 8])[0] & 0xFFF) <= len(raw) - off - 8
        assert not ok, "a well-formed header was refused"
        return
    assert 0 <= off and len(raw) - off >= 8
    dst, nid, sep, tl = struct.unpack(">HHHH", raw[off:off + 8])
    assert got == (dst, nid, sep, tl >> 12, tl & 0xFFF)
    assert got[4] <= len(raw) - off - 8


# --------------------------------------------------------------------------- MDR


NODE1_MAC = hwaddr_for(1)
NODE0_MAC = hwaddr_for(0)
OPEN_EPS = (0, 7, 0xFFFF)
ETH_HLEN = 14
RX_BUF = 1536


class Rx:
    """Node 1 with endpoints OPEN_EPS open (non-blocking) and counters to compare."""

    def __init__(self, **kw):
        self.c = Cluster(nodes=2, **kw)
        self.node = self.c.node(1)
        self.dev = self.node.pci_devices[0]
        self.nd = self.node.netdevs["eth0"]
        self.dp = self.node.services["dp"]
        self.proc = self.c.process(1)
        self.fds = {}
        for ep in OPEN_EPS:
            fd = self.proc.sync.dp_open(ep)
            self.proc.sync.set_blocking(fd, False)
            self.fds[ep] = fd

    def counters(self) -> dict:
        nd = self.nd.stats()
        out = {"rx_errors": nd["rx_errors"], "unknown_proto": nd["rx_dropped_unknown_protocol"],
               "malformed": self.dp.rx_malformed, "unknown_type": self.dp.rx_unknown_type,
               "no_endpoint": self.dp.rx_no_endpoint}
        for ep in OPEN_EPS:
            s = self.dp.endpoints[ep].tbp.stats()
            out[f"deposited{ep}"] = s["deposited"]
            out[f"too_long{ep}"] = s["dropped_too_long"]
            out[f"full{ep}"] = s["dropped_full"]
        return out

    def feed(self, frame, crc_ok=True):
        before = self.counters()
        self.dev.rx_frame(frame, crc_ok)
        self.c.engine.run()
        after = self.counters()
        diff = {k: after[k] - before[k] for k in after if after[k] != before[k]}
        return diff, self.drain()

    def drain(self):
        got = []
        for ep, fd in self.fds.items():
            while True:
                try:
                    tok = self.proc.sync.dp_read_token(fd)
                except BlockingIOError:
                    break
                got.append((ep, bytes(tok.data), tok.source))
                tok.release()
        return got


def expected_outcome(frame: bytes):
    """(counter diff, deliveries) the receive path must produce for a frame to node 1."""
    n = len(frame)
    if n < ETH_HLEN or n > RX_BUF:
        return {"rx_errors": 1}, []
    if frame[12:14] != DP_ETHERTYPE.to_bytes(2, "big"):
        return {"unknown_proto": 1}, []
    payload = frame[ETH_HLEN:]
    if len(payload) < DM_HEADER_BYTES:
        return {"malformed": 1}, []
    dst, nid, sep, tl = struct.unpack(">HHHH", payload[:8])
    mtype, length = tl >> 12, tl & 0xFFF
    if length > len(payload) - 8:
        return {"malformed": 1}, []
    if mtype != DM_TYPE_DATA:
        return {"unknown_type": 1}, []
    if dst not in OPEN_EPS:
        return {"no_endpoint": 1}, []
    if length > 1500:
        return {f"too_long{dst}": 1}, []
    return {f"deposited{dst}": 1}, [(dst, payload[8:8 + length], (nid, sep))]


@st.composite
def dp_frames(draw):
    dst_mac = draw(st.sampled_from([NODE1_MAC, NODE1_MAC, NODE1_MAC, b"\xff" * 6, NODE0_MAC,
                                    b"\x01\x02\x03\x04\x05\x06"]))
    proto = draw(st.sampled_from([DP_ETHERTYPE] * 6 + [0x0800, 0x88B6, 0]))
    dst_ep = draw(st.one_of(st.sampled_from(OPEN_EPS), st.sampled_from(OPEN_EPS + (1, 8)), U16))
    nid, sep = draw(U16), draw(U16)
    mtype = draw(st.sampled_from([0] * 6 + [1, 7, 15]))
    data = draw(st.one_of(st.binary(max_size=64), st.binary(min_size=1400, max_size=1600)))
    exact = min(len(data), DM_MAX_LENGTH)
    length = draw(st.one_of(st.just(exact), st.just(exact), st.integers(0, exact), st.integers(0, DM_MAX_LENGTH)))
    frame = dst_mac + NODE0_MAC + proto.to_bytes(2, "big") + \
        struct.pack(">HHHH", dst_ep, nid, sep, (mtype << 12) | length) + data
    cut = draw(st.one_of(st.none(), st.none(), st.none(), st.integers(0, len(frame))))
    return frame if cut is None else frame[:cut]


def _check(rx: Rx, frame: bytes):
    diff, got = rx.feed(frame)            # must not raise
    want_diff, want_got = expected_outcome(frame)
    if len(frame) >= 6 and frame[:6] == NODE1_MAC:
        assert diff == want_diff, (frame[:40], diff, want_diff)
        assert got == want_got
    else:
        # Addressed to someone else (or broadcast): dropped or delivered exactly as
        # it says, never delivered any other way.
        assert got in ([], want_got)


@pytest.fixture(scope="module")
def rx_shared():
    return Rx()


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame=st.binary(max_size=1600))
def test_arbitrary_bytes_never_raise_and_are_never_misdelivered(rx_shared, frame):
    _check(rx_shared, frame)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame=dp_frames())
def test_dp_shaped_frames_are_delivered_exactly_or_counted(rx_shared, frame):
    _check(rx_shared, frame)


def _dp_frame(dst_ep, data, *, length=None, mtype=0, proto=DP_ETHERTYPE, dst_mac=NODE1_MAC):
    length = len(data) if length is None else length
    return dst_mac + NODE0_MAC + proto.to_bytes(2, "big") + \
        struct.pack(">HHHH", dst_ep, 0, 42, (mtype << 12) | length) + data


@pytest.mark.parametrize("frame", [
    NODE1_MAC + NODE0_MAC + b"\x88\xb5",                                  # no header at all
    NODE1_MAC + NODE0_MAC + b"\x88\xb5" + b"\x00\x07\x00",                # 3 bytes of header
    NODE1_MAC + NODE0_MAC + b"\x88\xb5" + bytes(7),                       # 7 bytes of header
    _dp_frame(7, b"abc", length=4),                                       # length beyond the data
    _dp_frame(7, b"", length=1),
    _dp_frame(7, bytes(100), length=0xFFF),
    _dp_frame(7, bytes(46), length=200),                                  # padded short frame, lying length
], ids=["empty", "3-byte", "7-byte", "len+1", "len1-nodata", "len4095", "len200"])
def test_dp_ethertype_with_garbled_header_is_counted_malformed(frame):
    rx = Rx()
    diff, got = rx.feed(frame)
    assert diff == {"malformed": 1}
    assert got == []


def test_valid_frame_goes_through_and_padding_is_ignored():
    rx = Rx()
    frame = _dp_frame(7, b"hi", length=2) + bytes(40)      # padded to the minimum frame
    diff, got = rx.feed(frame)
    assert diff == {"deposited7": 1}
    assert got == [(7, b"hi", (0, 42))]


def test_frame_with_bad_crc_is_never_delivered():
    rx = Rx()
    diff, got = rx.feed(_dp_frame(7, b"corrupted"), crc_ok=False)
    assert got == []
    assert diff == {"rx_errors": 1}
    assert rx.dev.stats()["rx_crc_errors"] == 1


def test_too_long_for_the_receive_buffer_is_an_error_not_a_delivery():
    rx = Rx()
    diff, got = rx.feed(_dp_frame(7, bytes(1600), length=1600))
    assert got == [] and diff == {"rx_errors": 1}
    assert rx.dev.stats()["rx_too_long"] == 1
    # Fits the buffer but exceeds the pool's slot: dropped at the TBP and counted.
    diff, got = rx.feed(_dp_frame(7, bytes(1510)))
    assert got == [] and diff == {"too_long7": 1}


def _accounting(node, ep):
    t = node.services["dp"].endpoints[ep].tbp.stats()
    return t["deposited"] + t["dropped_full"] + t["dropped_too_long"] + node.pci_devices[0].stats()["rx_missed"]


def test_receive_ring_overrun_loses_frames_visibly_and_keeps_order():
    """300 frames land at once on a 128-descriptor ring: what does not fit is missed
    and counted (CSR8), what is delivered comes in arrival order, once each."""
    rx = Rx(params=[("dp.tbp_slots", 512)])          # the pool itself never overflows here
    for i in range(300):
        rx.dev.rx_frame(_dp_frame(7, i.to_bytes(2, "big")), True)
    rx.c.engine.run()
    seq = [int.from_bytes(g[1], "big") for g in rx.drain()]
    assert seq, "nothing delivered"
    assert seq == sorted(set(seq)), f"out of order or duplicated: {seq[:12]}..."
    assert len(seq) + rx.dev.stats()["rx_missed"] == 300
    assert _accounting(rx.node, 7) == 300
    diff, got = rx.feed(_dp_frame(7, b"after overrun"))
    assert got == [(7, b"after overrun", (0, 42))]


class _FakeTransport:
    """A real-mode transport holding frames that arrived while the node was busy."""

    max_frame = 2048

    def __init__(self):
        self.pending = []

    def send(self, frame):
        return True

    def recv_into(self, buf):
        if not self.pending:
            return -1
        f = self.pending.pop(0)
        buf[:len(f)] = f
        return len(f)

    def fileno(self):
        return -1

    def prepare_to_sleep(self):
        return True

    def drain(self):
        pass

    def stats(self):
        return {}


def test_real_mode_poll_of_a_full_transport_keeps_order():
    """Real time: `poll_devices` hands the device every frame the transport holds at
    once; with more than a ring's worth pending, frames must still be delivered in
    order and once each, the rest counted as missed."""
    from kernelsim.media.backend import DevicePort
    from libdp import DP

    transport = _FakeTransport()
    hosts = {r: {"ether": hwaddr_for(r)} for r in range(2)}
    node = Cluster.real_node(1, hosts, DevicePort(transport), params=[("dp.tbp_slots", 512)])
    dp = DP(node.spawn("rx"))
    fd = dp.sync.dp_open(7)
    dp.sync.set_blocking(fd, False)
    transport.pending = [_dp_frame(7, i.to_bytes(2, "big")) for i in range(200)]
    assert node.poll_devices() == 200
    seq = []
    while True:
        try:
            seq.append(int.from_bytes(dp.sync.dp_read(fd), "big"))
        except BlockingIOError:
            break
    assert seq, "nothing delivered"
    assert seq == sorted(set(seq)), f"out of order or duplicated: {seq[:12]}..."
    assert len(seq) + node.pci_devices[0].stats()["rx_missed"] == 200
    assert _accounting(node, 7) == 200


def _real_receiver(tbp_slots=64):
    from kernelsim.media.backend import DevicePort
    from libdp import DP

    transport = _FakeTransport()
    hosts = {r: {"ether": hwaddr_for(r)} for r in range(2)}
    node = Cluster.real_node(1, hosts, DevicePort(transport), params=[("dp.tbp_slots", tbp_slots)])
    node.engine.run()
    return transport, node, DP(node.spawn("rx"))


def test_real_mode_nonblocking_read_takes_what_the_wire_holds():
    """A real node in the caller's process hears its wire only when polled: a
    non-blocking dp_read takes what has arrived (as a kernel's interrupt would have)
    before it says EAGAIN -- and says EAGAIN, once, when nothing has."""
    transport, node, dp = _real_receiver()
    fd = dp.sync.dp_open(7)
    dp.sync.set_blocking(fd, False)
    with pytest.raises(BlockingIOError):
        dp.sync.dp_read(fd)
    transport.pending = [_dp_frame(7, b"first"), _dp_frame(7, b"second"), _dp_frame(9, b"closed ep")]
    assert dp.sync.dp_read(fd) == b"first"
    assert transport.pending == []              # one pass took the whole wire
    assert dp.sync.dp_read(fd) == b"second"
    with pytest.raises(BlockingIOError):
        dp.sync.dp_read(fd)
    transport.pending = [_dp_frame(9, b"for a closed endpoint")]
    with pytest.raises(BlockingIOError):        # taken and dropped, not delivered
        dp.sync.dp_read(fd)
    assert transport.pending == []


@pytest.mark.trio
async def test_real_mode_nonblocking_async_read_takes_what_the_wire_holds():
    transport, node, dp = _real_receiver()
    fd = await dp.dp_open(7)
    dp.set_blocking(fd, False)
    with pytest.raises(BlockingIOError):
        await dp.dp_read(fd)
    transport.pending = [_dp_frame(7, b"late")]
    assert await dp.dp_read(fd) == b"late"
    with pytest.raises(BlockingIOError):
        await dp.dp_read(fd)


def test_frame_for_another_stations_mac_is_not_delivered():
    """Node 1's NIC must not hand DP a frame addressed to a different station."""
    rx = Rx()
    diff, got = rx.feed(_dp_frame(7, b"not for you", dst_mac=b"\x02\x00\xd9\x00\x00\x63"))
    assert got == []


def test_target_own_nid_never_reaches_the_other_node():
    """dp_target(fd, own NID, ep): the message is for this node's endpoint `ep` (or
    dropped), never for endpoint `ep` of the node at the other end of the cable."""
    c = Cluster(nodes=2)
    a, b = c.process(0), c.process(1)
    fa = a.sync.dp_open(5)
    a.sync.dp_target(fa, 0, 5)
    fb = b.sync.dp_open(5)
    a.sync.dp_write(fa, b"to myself")
    c.engine.run()
    b.sync.set_blocking(fb, False)
    with pytest.raises(BlockingIOError):
        b.sync.dp_read(fb)


def test_real_port_filters_by_the_perfect_filter_the_driver_loaded():
    """The 21140's address filter behind a real transport's port: a frame for this node's
    MAC and a broadcast frame are taken, a frame for any other unicast MAC -- one byte
    off, in the first or the last position -- is filtered and counted (CSR6 without PR)."""
    from kernelsim.media.backend import DevicePort

    transport = _FakeTransport()
    hosts = {r: {"ether": hwaddr_for(r)} for r in range(2)}
    node = Cluster.real_node(1, hosts, DevicePort(transport))
    node.engine.run()                           # the setup frame loads the filter
    dev = node.pci_devices[0]
    other_last = NODE1_MAC[:5] + bytes([NODE1_MAC[5] ^ 1])
    other_first = bytes([NODE1_MAC[0] ^ 2]) + NODE1_MAC[1:]
    transport.pending = [_dp_frame(7, b"a"), _dp_frame(7, b"b", dst_mac=other_last),
                         _dp_frame(7, b"c", dst_mac=b"\xff" * 6), _dp_frame(7, b"d", dst_mac=other_first)]
    assert node.poll_devices() == 4
    st = dev.stats()
    assert st["rx_filtered"] == 2
    assert st["rx_frames"] == 2
