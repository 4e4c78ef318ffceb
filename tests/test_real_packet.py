"""Real mode over raw Ethernet: AF_PACKET sockets on veth pairs between network namespaces.

Needs root (namespaces, veths, raw sockets): the tests that build namespaces are
skipped, with the reason `NetnsCluster.available()` gives, where that is missing --
and only then. Nothing asserts a speed; every wait is bounded.
"""
from __future__ import annotations

import errno
import json
import os

import pytest
from pyroute2 import netns as pyroute2_netns

import libdp
from kernelsim.media.netns import NetnsCluster
from kernelsim.media.packet import DP_ETHERTYPE, PacketPort
from kernelsim.media.real import wait_frame_sync
from libdp._cli import main
from libdp._realrun import run_real_spmd
from nic_drivers.dec21140 import hwaddr_for

TIMEOUT = 60.0
OTHER_ETHERTYPE = 0x88B6          # the other IEEE 802 local experimental EtherType


@pytest.fixture
def netns_ok():
    ok, reason = NetnsCluster.available()
    if not ok:
        pytest.skip(reason)


def _ours() -> set[str]:
    """Namespaces this test process made (their names carry its pid) and left behind."""
    return {n for n in pyroute2_netns.listnetns() if n.startswith(f"dp-{os.getpid()}-")}


@pytest.fixture
def cable(netns_ok):
    before = _ours()
    with NetnsCluster.create(2, macs={0: hwaddr_for(0), 1: hwaddr_for(1)}) as nc:
        yield nc
    assert _ours() == before


def _frame(dst: bytes, src: bytes, payload: bytes, ethertype: int = DP_ETHERTYPE) -> bytes:
    return dst + src + ethertype.to_bytes(2, "big") + payload


def _recv(port, buf, timeout=5.0) -> bytes:
    assert wait_frame_sync(port, 0.0, timeout=timeout), "frame did not arrive"
    n = port.recv_into(buf)
    assert n >= 0
    return bytes(buf[:n])


# --------------------------------------------------------------------------- the manager


def test_cluster_of_two_is_a_veth_pair_with_the_given_macs_and_mtu(cable):
    from pyroute2 import IPRoute
    assert cable.switch is None and cable.nodes == 2
    for nid in (0, 1):
        ns, ifname = cable.iface(nid)
        assert ns in pyroute2_netns.listnetns() and str(os.getpid()) in ns
        with IPRoute(netns=ns, flags=0) as ipr:
            link = ipr.get_links(ipr.link_lookup(ifname=ifname)[0])[0]
            assert link.get("address") == hwaddr_for(nid).hex(":")
            assert link.get("mtu") == 1500 and link.get("operstate") == "UP"
            assert link.get_nested("IFLA_LINKINFO", "IFLA_INFO_KIND") == "veth"
    with pytest.raises(OSError):
        cable.iface(2)
    cable.destroy()
    assert not cable.exists()
    cable.destroy()                              # idempotent


def test_cluster_of_three_is_switched_and_destroy_removes_it(netns_ok):
    macs = {nid: hwaddr_for(nid) for nid in range(3)}
    nc = NetnsCluster.create(3, macs=macs)
    try:
        assert nc.switch is not None and len(nc.namespaces) == 4
        assert len({nc.iface(n)[0] for n in range(3)}) == 3
        ports = [PacketPort.open(ifname, netns=ns) for ns, ifname in map(nc.iface, range(3))]
        try:
            buf = bytearray(ports[0].max_frame)
            f = _frame(macs[2], macs[0], b"through the bridge".ljust(46, b"."))
            assert ports[0].send(f)
            assert _recv(ports[2], buf) == f
        finally:
            for p in ports:
                p.close()
    finally:
        nc.destroy()
    assert not nc.exists()


def test_create_validates_its_arguments():
    with pytest.raises(OSError) as e:
        NetnsCluster.create(1)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError):
        NetnsCluster.create(2, macs={0: hwaddr_for(0), 1: hwaddr_for(0)})   # same MAC twice
    with pytest.raises(OSError):
        NetnsCluster.create(2, macs={5: hwaddr_for(5)})


# --------------------------------------------------------------------------- PacketPort


@pytest.mark.parametrize("ring", [False, True], ids=["recvfrom", "rx_ring"])
def test_packet_port_round_trip_between_namespaces(cable, ring):
    """The same frames, exact, whether they come by recvfrom(2) or through a receive ring
    shared with the kernel (what nodes use)."""
    (ns0, if0), (ns1, if1) = cable.iface(0), cable.iface(1)
    with PacketPort.open(if0, netns=ns0, rx_ring=ring) as a, PacketPort.open(if1, netns=ns1, rx_ring=ring) as b:
        assert (a.rx_ring is not None) == (b.rx_ring is not None) == ring
        assert a.max_frame == b.max_frame == 1514 and a.mtu == 1500
        assert a.hwaddr == hwaddr_for(0) and b.hwaddr == hwaddr_for(1)
        assert a.prepare_to_sleep() is True and a.fileno() == a.socket.fileno()
        buf = bytearray(b.max_frame)
        assert b.recv_into(buf) == -1 and not b.pending()
        sizes = (46, 47, 100, 1023, 1500)        # payload bytes: minimum frame .. MTU
        for i, n in enumerate(sizes):
            f = _frame(b.hwaddr, a.hwaddr, bytes((i * 7 + k) & 0xFF for k in range(n)))
            assert a.send(f)
            assert _recv(b, buf) == f            # whole frame, header included, exact
            assert b.recv_into(buf) == -1
        # and back, the other way
        f = _frame(a.hwaddr, b.hwaddr, b"pong".ljust(46, b"\0"))
        assert b.send(f)
        assert _recv(a, buf) == f
        # a short frame: padding is the wire's business, the bytes sent come out first
        short = _frame(b.hwaddr, a.hwaddr, b"x")
        assert a.send(short)
        got = _recv(b, buf)
        assert got[:len(short)] == short and not any(got[len(short):])
        # what a port sent never comes back to it
        assert a.recv_into(buf) == -1
        with pytest.raises(ValueError):
            a.send(_frame(b.hwaddr, a.hwaddr, bytes(1501)))     # beyond the MTU
        assert a.stats()["sent"] == len(sizes) + 1 and b.stats()["received"] == len(sizes) + 1
        # a frame longer than the caller's buffer is lost and reported
        assert a.send(_frame(b.hwaddr, a.hwaddr, bytes(200)))
        assert wait_frame_sync(b, 0.0, timeout=5.0)
        with pytest.raises(ValueError):
            b.recv_into(bytearray(64))
        assert b.stats()["truncated"] == 1
        # more frames than a pass takes: every one, in order (a ring wraps around)
        frames = [_frame(b.hwaddr, a.hwaddr, i.to_bytes(4, "big").ljust(46, b"~")) for i in range(1500)]
        got = []
        for f in frames:
            assert a.send(f)
            while (n := b.recv_into(buf)) >= 0:
                got.append(bytes(buf[:n]))
        while len(got) < len(frames) and wait_frame_sync(b, 0.0, timeout=5.0):
            while (n := b.recv_into(buf)) >= 0:
                got.append(bytes(buf[:n]))
        assert got == frames
    if ring:                                     # closed: the ring is unmapped, and says so safely
        assert not b.rx_ring.pending() and b.rx_ring.recv_into(buf) == -1


def test_packet_port_receives_only_its_ethertype(cable):
    (ns0, if0), (ns1, if1) = cable.iface(0), cable.iface(1)
    with PacketPort.open(if0, netns=ns0) as a, PacketPort.open(if1, netns=ns1) as b, \
            PacketPort.open(if0, OTHER_ETHERTYPE, netns=ns0) as a_other, \
            PacketPort.open(if1, OTHER_ETHERTYPE, netns=ns1) as b_other:
        buf = bytearray(b.max_frame)
        other = _frame(b.hwaddr, a.hwaddr, b"not DP".ljust(46, b"-"), OTHER_ETHERTYPE)
        dp = _frame(b.hwaddr, a.hwaddr, b"DP".ljust(46, b"+"))
        assert a_other.send(other)
        assert a.send(dp)
        # the other EtherType was on the wire (its own socket got it) ...
        assert _recv(b_other, buf) == other
        # ... but the DP port's next frame is the DP one, and there is nothing after it
        assert _recv(b, buf) == dp
        assert b.recv_into(buf) == -1 and b_other.recv_into(buf) == -1


@pytest.mark.parametrize("ring", [False, True], ids=["recvfrom", "rx_ring"])
def test_outgoing_frames_are_skipped_by_a_tap(cable, ring):
    """A socket of every EtherType (a tap) also sees what its interface transmits, as
    PACKET_OUTGOING (the kernel only spares the very socket that sent it): recv_into
    drops those and returns the next frame that came in -- from recvfrom(2) or the ring."""
    import socket
    from pyroute2.netns import create_socket
    (ns0, if0), (ns1, if1) = cable.iface(0), cable.iface(1)
    sock = create_socket(ns0, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003), flags=0)  # ETH_P_ALL
    sock.bind((if0, 0x0003))
    with PacketPort(sock, if0, 0x0003, rx_ring=ring) as tap, PacketPort.open(if0, netns=ns0) as a, \
            PacketPort.open(if1, netns=ns1) as b:
        buf = bytearray(tap.max_frame)
        out = _frame(b.hwaddr, a.hwaddr, b"out".ljust(46, b"."))
        assert a.send(out)
        assert _recv(b, buf) == out
        assert wait_frame_sync(tap, 0.0, timeout=5.0)       # the tap holds node 0's own frame ...
        assert tap.recv_into(buf) == -1                      # ... which is not a received one
        back = _frame(a.hwaddr, b.hwaddr, b"in".ljust(46, b"."))
        assert b.send(back)
        assert _recv(tap, buf) == back and _recv(a, buf) == back
        assert tap.stats()["own_skipped"] == 1 and tap.stats()["received"] == 1


def test_packet_port_open_errors(cable):
    with pytest.raises(OSError) as e:
        PacketPort.open("nosuch0", netns=cable.iface(0)[0])
    assert e.value.errno == errno.ENODEV
    with pytest.raises(ValueError):
        PacketPort.open("eth0", 1500)                 # an 802.3 length field, not an EtherType


# --------------------------------------------------------------------------- real mode


def test_real_pingpong_over_packet_transport(netns_ok):
    before = _ours()
    results, stats = run_real_spmd(libdp.pingpong, [1, 1500], 30, transport="packet", timeout=TIMEOUT)
    rows = results[0]
    assert [r["size"] for r in rows] == [1, 1500]
    for r in rows:
        assert r["rtt_us"] > 0 and r["one_way_us"] == pytest.approx(r["rtt_us"] / 2)
        assert r["samples"] + r["lost"] == 30      # a real transport may lose: a lost ping is a lost sample
    warm = 10                                       # pingpong's warm-up round trips per size
    assert results[1]["echoed"] >= sum(r["samples"] for r in rows)
    for node in ("node0", "node1"):
        eth = stats[node]["eth0"]
        assert eth["tx_frames"] >= 2 * (warm + 30) and eth["rx_frames"] >= 2 * (warm + 30)
        # the 1500-byte messages went whole: 14-byte Ethernet + 8-byte DM header + 1500 bytes a frame
        assert eth["tx_bytes"] >= (warm + 30) * (14 + 8 + 1500)
        dev = eth["device"]
        assert dev["rx_filtered"] == 0 and dev["rx_crc_errors"] == 0 and eth["rx_errors"] == 0
    assert _ours() == before                        # the namespaces are gone


def test_real_pingpong_over_packet_through_the_cli(netns_ok, capsys):
    rc = main(["pingpong", "--real", "--transport", "packet", "--sizes", "1,1500", "--iters", "30", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["time"] == "real" and doc["nic"] == "dec21140"
    assert [r["size"] for r in doc["results"]] == [1, 1500]
    assert all(r["rtt_us"] > 0 for r in doc["results"])


async def _fails(dp, rank, size):
    raise RuntimeError(f"rank {rank} gives up")


def test_namespaces_are_removed_when_the_program_fails(netns_ok):
    before = _ours()
    with pytest.raises(RuntimeError, match="gives up"):
        run_real_spmd(_fails, transport="packet", timeout=TIMEOUT)
    assert _ours() == before


def test_packet_transport_needs_an_ethernet_nic():
    before = _ours()
    for nic in ("atm", "myrinet", "tb2"):
        with pytest.raises(OSError) as e:
            run_real_spmd(libdp.pingpong, [1], 1, nic=nic, transport="packet")
        assert e.value.errno == errno.EINVAL and "dec21140" in e.value.strerror
    assert _ours() == before
    rc = main(["pingpong", "--real", "--transport", "packet", "--nic", "atm", "--iters", "1"])
    assert rc == 1


def _unprivileged(conn):
    """In a forked child: become nobody (no capabilities), then try everything."""
    try:
        if os.geteuid() == 0:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
        out = {"probe": NetnsCluster._probe()}
        for what, call in (("port", lambda: PacketPort.open("lo")), ("netns", lambda: NetnsCluster.create(2)),
                           ("real", lambda: run_real_spmd(libdp.pingpong, [1], 1, transport="packet"))):
            try:
                call()
                out[what] = None
            except OSError as exc:
                out[what] = (exc.errno, str(exc))
        conn.send(out)
    except BaseException as exc:  # noqa: BLE001
        conn.send({"error": repr(exc)})
    finally:
        conn.close()


def test_without_privileges_the_errors_say_what_is_needed():
    import multiprocessing
    from kernelsim.media.netns import _pyroute2
    _pyroute2()          # import pyroute2 (and asyncio) now: a child that is nobody may not read the stdlib
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_unprivileged, args=(child,))
    p.start()
    child.close()
    try:
        assert parent.poll(TIMEOUT)
        out = parent.recv()
    finally:
        p.join(5)
    assert "error" not in out, out
    ok, reason = out["probe"]
    assert not ok and "root" in reason
    err, text = out["port"]
    assert err == errno.EPERM and "CAP_NET_RAW" in text and "root" in text
    for what in ("netns", "real"):
        err, text = out[what]
        assert err == errno.EPERM and "root" in text
