"""Myrinet fabrics at scale (issue 14): the PPro's 3D grid and the P3's Clos switch --
hop counts, routes that deliver, deadlock-free channel dependencies, contention at an
output port, latency per switch, and bad topology parameters refused."""
from __future__ import annotations

import errno
import random

import pytest
import trio

from dpcore._codec import DM_HEADER_BYTES
from kernelsim import Engine
from libdp import Cluster
from libdp._bench import pingpong
from libdp._cluster import build_profile
from nic_drivers.myrinet.fabric import ROUTE_BIT, Clos, Grid, MyrinetFabric, RouteTable, make_topology

EP = 0x77


class Board:
    """What the fabric needs of a LANai board to cable it and load its routes."""

    def __init__(self, nid):
        self.nid = nid
        self.port = None
        self.route_table = {}


def fabric(platform, nodes, params=()):
    """A fabric of `nodes` stand-in boards: cabling and routes without the machines."""
    f = MyrinetFabric(Engine(), build_profile(platform, params), random.Random(0))
    f.build([Board(i) for i in range(nodes)])
    return f


def hops(f, a, b):
    return len(f.nis[a].route_table[b])


def all_hops(f):
    return {(a, b): hops(f, a, b) for a in f.nis for b in f.nis if a != b}


# --------------------------------------------------------------------------- hop counts


def test_ppro_grid_of_64_nodes_reaches_ten_hops_and_no_more():
    """LCI-A28/A30: 8-port switches in a 3D grid; the farthest NIs are 10 switches apart."""
    f = fabric("ppro200_lanai4", 64)
    assert f.topology.dims == (8, 2, 2) and f.topology.hosts == 2
    h = all_hops(f)
    assert max(h.values()) == 10 == f.topology.diameter() == f.stats()["diameter_hops"]
    assert h[0, 63] == 10 and h[0, 1] == 1 and h[0, 2] == 2       # 0 and 1 share a switch
    # LCI-A31: at most 1 us of switch delay
    assert max(h.values()) * f.hop_s <= 1e-6 + 1e-12


def test_p3_clos_of_64_nodes_is_at_most_three_hops():
    """LCI-A32/A33: one full-bisection switch, at most 3 hops NI to NI."""
    f = fabric("p3_1000_lanai9", 64)
    t = f.topology
    assert (t.levels, t.nleaves, t.per_level[-1]) == (2, 16, 8)
    h = all_hops(f)
    assert set(h.values()) == {1, 3} and f.topology.diameter() == 3
    assert h[0, 1] == 3 and h[0, 16] == 1                            # round-robin over line cards


@pytest.mark.parametrize("nodes,shape,diameter", [(2, (8, 2, 2), 1), (16, (8, 2, 2), 8), (65, (8, 4, 2), 12),
                                                  (128, (8, 4, 2), 12), (256, (8, 4, 4), 14),
                                                  (1024, (8, 8, 8), 22)])
def test_the_grid_grows_by_doubling_its_smallest_dimension(nodes, shape, diameter):
    g = Grid("8x2x2", 8, nodes)
    assert g.dims == shape and g.diameter() == diameter


@pytest.mark.parametrize("nodes", [2, 5, 16, 17, 33, 40, 70])
def test_grid_diameter_is_the_longest_route(nodes):
    f = fabric("ppro200_lanai4", nodes, [("switch.grid", "4x2x2")])
    assert max(all_hops(f).values(), default=1) == f.topology.diameter()


@pytest.mark.parametrize("nodes,levels,diameter", [(2, 2, 3), (128, 2, 3), (129, 3, 5), (1024, 3, 5)])
def test_the_clos_adds_a_level_beyond_128_nodes(nodes, levels, diameter):
    c = Clos(2, 16, nodes)
    assert c.levels == levels and c.diameter() == diameter
    assert c.nleaves * c.h >= nodes


@pytest.mark.parametrize("nodes", [3, 9, 40])
def test_clos_diameter_is_the_longest_route(nodes):
    f = fabric("p3_1000_lanai9", nodes, [("switch.ports", 4), ("switch.levels", 1)])
    assert max(all_hops(f).values()) == f.topology.diameter()


def test_1024_p3_nodes_cross_five_crossbars_between_pods_and_one_within_a_line_card():
    f = fabric("p3_1000_lanai9", 1024)
    t = f.topology
    assert (t.levels, t.nswitches) == (3, 128 + 128 + 64)
    assert hops(f, 0, 128) == 1                     # same leaf (leaf 0, second host port)
    assert hops(f, 0, 1) == 3                       # leaves 0 and 1: one pod
    assert hops(f, 0, 8) == 5 and hops(f, 0, 1023) == 5
    assert len(f.nis[5].route_table) == 1024 and len(f.nis[5].route_table.used()) == 0


# --------------------------------------------------------------------------- routes


@pytest.mark.parametrize("platform", ["ppro200_lanai4", "p3_1000_lanai9"])
def test_every_route_ends_at_its_destination_one_byte_per_switch(platform):
    f = fabric(platform, 40)
    for a in f.nis:
        for b in f.nis:
            route = f.nis[a].route_table[b]
            assert all(x & ROUTE_BIT for x in route)
            chans = f.path(route, a)
            assert chans[-1].to_ni and chans[-1].target is f.nis[b]
            assert len(chans) == len(route) + 1             # the NI's own link, then one per switch


@pytest.mark.parametrize("platform,nodes", [("ppro200_lanai4", 64), ("p3_1000_lanai9", 64),
                                            ("p3_1000_lanai9", 160)])
def test_routes_are_deadlock_free(platform, nodes):
    """No cycle in the channel dependency graph of the routes loaded (Dally and Seitz)."""
    assert fabric(platform, nodes).check_deadlock_free() is None


def test_the_deadlock_check_finds_a_cycle_of_turns():
    """Four routes turning the same way around a 2x2 ring of switches wait on each other."""
    f = fabric("ppro200_lanai4", 8, [("switch.grid", "2x2x1")])
    g = f.topology
    xp, xm, yp, ym = g.port(0, 1), g.port(0, -1), g.port(1, 1), g.port(1, -1)
    # switches 0 (0,0), 1 (1,0), 2 (0,1), 3 (1,1); node 2k sits on switch k, port 0
    turns = {(0, 6): [xp, yp, 0], (2, 4): [yp, xm, 0], (6, 0): [xm, ym, 0], (4, 2): [ym, xp, 0]}
    for (a, b), ports in turns.items():
        f.nis[a].route_table[b] = bytes(ROUTE_BIT | p for p in ports)
    cycle = f.check_deadlock_free(turns)
    assert cycle is not None and cycle[0] == cycle[-1] and len(cycle) == 5
    assert f.check_deadlock_free([(0, 6), (2, 4), (6, 0)]) is None       # three of them cannot close it


def test_route_tables_compute_on_demand_and_keep_what_was_used():
    f = fabric("ppro200_lanai4", 64)
    table = f.nis[0].route_table
    assert isinstance(table, RouteTable) and table.used() == {}
    r = table[63]
    assert table[63] is r and list(table.used()) == [63]
    assert 64 not in table and table.get(64) is None and len(table) == 64
    with pytest.raises(KeyError):
        table["x"]


def test_frames_cross_the_grid_between_far_nodes():
    c = Cluster(nodes=64, nic="myrinet")
    a, b = c.process(0), c.process(63)
    fa = a.sync.dp_open(EP)
    a.sync.dp_target(fa, 63, EP)
    fb = b.sync.dp_open(EP)
    b.sync.dp_target(fb, 0, EP)
    a.sync.dp_write(fa, b"across ten switches")
    assert b.sync.dp_read(fb, 100) == b"across ten switches"
    b.sync.dp_write(fb, b"and back")
    assert a.sync.dp_read(fa, 100) == b"and back"
    assert c.medium.stats()["dropped"] == 0


# --------------------------------------------------------------------------- timing


def one_way_us(c, a, b, size=1, iters=10):
    """DP's ping-pong (dp pingpong's program) between nodes `a` and `b` of cluster `c`."""
    async def both():
        out = {}

        async def side(rank, nid, peer):
            out[rank] = await pingpong(c.process(nid), rank, 2, [size], iters, peer=peer)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(side, 0, a, b)
            nursery.start_soon(side, 1, b, a)
        return out[0][0]["one_way_us"]
    return c.run(both)


def route_pio_us(c, short, long):
    """The sender writes the route with a 1-byte DP frame by PIO: a longer route may take
    more PCI data phases."""
    pio = c.nodes[0].pci_devices[0].pio_time
    frame = 4 + DM_HEADER_BYTES + 1
    return (pio(long + frame) - pio(short + frame)) * 1e6


def test_each_grid_hop_adds_a_switch_a_cable_and_a_route_byte():
    c = Cluster(nodes=64, nic="myrinet")
    near, far = one_way_us(c, 0, 1), one_way_us(c, 0, 63)
    per_switch = 0.1 + 0.05 + 8 / 1.28e9 * 1e6        # LCI-A29, the cable, one route byte
    longer_pio = route_pio_us(c, 1, 10)
    assert longer_pio > 0
    assert far - near == pytest.approx(9 * per_switch + longer_pio, rel=1e-6)


def test_p3_clos_latency_is_three_switches_between_line_cards_and_one_within():
    c = Cluster(nodes=32, nic="myrinet", platform="p3_1000_lanai9")
    across, within = one_way_us(c, 0, 1), one_way_us(c, 0, 16)
    per_switch = 0.15 + 0.1 + 8 / 2.0e9 * 1e6
    assert across - within == pytest.approx(2 * per_switch + route_pio_us(c, 1, 3), rel=1e-6)


def test_dp_crosses_the_three_level_clos_between_pods():
    """P3 beyond 128 nodes: leaves 0 and 1 share a pod (3 crossbars), leaves 0 and 8 do not (5)."""
    c = Cluster(nodes=130, nic="myrinet", platform="p3_1000_lanai9")
    table = c.nodes[0].pci_devices[0].route_table
    assert (len(table[1]), len(table[8]), len(table[128])) == (3, 5, 1)
    pod, across = one_way_us(c, 0, 1), one_way_us(c, 0, 8)
    per_switch = 0.15 + 0.1 + 8 / 2.0e9 * 1e6          # P3's crossbar, fiber, one route byte
    assert across - pod == pytest.approx(2 * per_switch + route_pio_us(c, 3, 5), rel=1e-6)


def test_two_senders_share_one_output_port():
    """Nodes 2 (switch +x of node 1's) and 16 (+y) both send 4 KB to node 1: its link carries
    one at a time, the later head waits at the switch for the first packet's tail."""
    c = Cluster(nodes=17, nic="myrinet")
    f = c.medium
    got = []
    ni1 = c.nodes[1].pci_devices[0]
    sink = ni1.firmware.on_packet

    def on_packet(pkt, sink=sink):
        got.append(c.engine.now)
        return sink(pkt)
    ni1.firmware.on_packet = on_packet
    n = 4000
    for src in (2, 16):
        ni = c.nodes[src].pci_devices[0]
        f.inject(ni, ni.route_table[1] + bytes(n), None)
    c.engine.run()
    link = f.stats()["links"]["sw0->n1"]
    assert link["packets"] == 2 and link["waits"] == 1 and link["wait_us"] > 0
    assert len(got) == 2
    wire = (n + 1 + 1) / 160e6                       # the last route byte, the data, the CRC
    assert got[1] - got[0] == pytest.approx(wire, rel=0.05)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("params", [
    [("switch.topology", "ring")],
    [("switch.grid", "4x4")],
    [("switch.grid", "0x2x2")],
    [("switch.topology", "grid"), ("switch.ports", 6)],            # no port left for a host
    [("switch.topology", "clos"), ("switch.ports", 7)],            # odd crossbar
    [("switch.topology", "clos"), ("switch.levels", 0)],
    [("switch.topology", "chain"), ("switch.hops", 30), ("switch.ports", 8)],   # routes beyond 24 bytes
])
def test_impossible_topologies_are_refused(params):
    with pytest.raises(OSError) as ei:
        Cluster(nodes=40, nic="myrinet", params=params)
    assert ei.value.errno == errno.EINVAL


def test_make_topology_names_the_choices():
    with pytest.raises(OSError, match="chain, grid, clos"):
        make_topology(build_profile("ppro200_lanai4", [("switch.topology", "torus")]), 4)


def test_a_profile_without_the_topologys_key_is_refused():
    prof = build_profile("ppro200_lanai4", [("switch.topology", "clos")])
    del prof._values["switch.levels"]
    with pytest.raises(OSError, match="switch.levels") as ei:
        make_topology(prof, 4)
    assert ei.value.errno == errno.EINVAL
