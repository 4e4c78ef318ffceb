"""The modeled figures (the issue's acceptance figures) and input -> output directions
that must hold physically. All times are modeled; nothing here looks at a wall clock.
"""
from __future__ import annotations

import functools
import json

import pytest
import trio

from libdp import Cluster, bandwidth, pingpong
from libdp._cli import main

PAPER_RTT_1B_US = 46.6          # DP-A08, 1-byte round trip on the P133 + 21140
PAPER_BW_1500_MBS = 12.2        # DP-A08, 1500-byte streaming bandwidth


def _cluster(params=(), dec=None):
    """A 2-node cluster; `dec` reloads the dec21140 driver with those module parameters."""
    c = Cluster(nodes=2, params=params)
    if dec is not None:
        for n in c.nodes:
            n.modules.rmmod("dp")
            n.modules.rmmod("dec21140")
            n.modules.insmod("dec21140", **dec)
            n.modules.insmod("dp")
    return c


# Comparisons of two runs allow this much relative slack where the physics says
# "not lower": equal inputs on the path must not show up as a difference, whatever
# order trio happens to run simultaneously runnable tasks in.
SLACK = 1e-3


def not_above(x, y):
    return x <= y * (1 + SLACK)


def rtt_us(sizes=(1, 1500), iters=20, params=(), dec=None) -> dict:
    rows = _cluster(params, dec).run_spmd(pingpong, list(sizes), iters)[0]
    return {r["size"]: r["rtt_us"] for r in rows}


def bw_mbs(sizes=(1500,), iters=200, params=(), dec=None) -> dict:
    rows = _cluster(params, dec).run_spmd(stream(bandwidth, iters), list(sizes))[0]
    return {r["size"]: r["mbytes_per_s"] for r in rows}


def stream(program, messages):
    """The window benchmark as one stream: `messages` messages closed by one acknowledgement."""
    return functools.partial(program, iters=1, window=messages, warmup=0)


def wire_limit_mbs(size, rate_bps=100e6):
    """Payload rate of back-to-back DP frames: preamble 8 + Ethernet header 14 + DM
    header 8 + data + FCS 4 (at least 64) + inter-frame gap 12, MB = 10^6 bytes."""
    on_wire = 8 + max(14 + 8 + size + 4, 64) + 12
    return size / (on_wire * 8 / rate_bps) / 1e6


# --------------------------------------------------------------------------- figures


def test_one_byte_round_trip_matches_the_paper():
    rtt = rtt_us(sizes=(1,), iters=50)[1]
    assert rtt == pytest.approx(PAPER_RTT_1B_US, rel=0.05)


def test_1500_byte_bandwidth_matches_the_paper():
    bw = bw_mbs(iters=200)[1500]
    assert bw == pytest.approx(PAPER_BW_1500_MBS, rel=0.05)


def test_ten_megabit_link_gives_about_a_tenth_of_the_bandwidth():
    fast = bw_mbs(iters=100)[1500]
    slow = bw_mbs(iters=100, params=[("link.rate_bps", "10e6")])[1500]
    assert 0.08 <= slow / fast <= 0.12


@pytest.mark.parametrize("rate", [100e6, 10e6])
def test_bandwidth_never_exceeds_the_wire(rate):
    got = bw_mbs(sizes=(64, 512, 1500), iters=100, params=[("link.rate_bps", rate)])
    for size, mbs in got.items():
        assert 0 < mbs <= wire_limit_mbs(size, rate), size


def test_bandwidth_grows_with_message_size():
    got = bw_mbs(sizes=(1, 64, 512, 1500), iters=100)
    assert got[1] < got[64] < got[512] < got[1500]


def test_larger_messages_take_longer():
    sizes = (1, 64, 512, 1500)
    got = rtt_us(sizes=sizes, iters=20)
    values = [got[s] for s in sizes]
    assert values == sorted(values) and len(set(values)) == len(values)


def test_one_way_latency_is_half_the_round_trip():
    rows = Cluster(nodes=2).run_spmd(pingpong, [1, 1500], 10)[0]
    for r in rows:
        assert r["one_way_us"] == pytest.approx(r["rtt_us"] / 2)


# --------------------------------------------------------------------------- directions


def test_slower_cpu_raises_the_one_byte_round_trip():
    base = rtt_us(sizes=(1,))[1]
    slow = rtt_us(sizes=(1,), params=[("cpu.hz", 66.5e6)])[1]
    fast = rtt_us(sizes=(1,), params=[("cpu.hz", 266e6)])[1]
    assert fast < base < slow


def test_store_and_forward_off_never_slows_and_helps_large_frames():
    on = rtt_us(sizes=(1, 512, 1500), dec={"store_forward": True})
    off = rtt_us(sizes=(1, 512, 1500), dec={"store_forward": False})
    for s in on:
        assert not_above(off[s], on[s]), s
    assert off[1500] < on[1500] * (1 - SLACK)


def test_reloading_the_driver_with_defaults_changes_nothing():
    reloaded, fresh = rtt_us(dec={}), rtt_us()
    for s in fresh:
        assert reloaded[s] == pytest.approx(fresh[s], rel=SLACK)


@pytest.mark.parametrize("key,slower,faster", [
    ("mem.copy_rate_Bps", 25e6, 100e6),
    ("pci.dma_rate_Bps", 63.6e6, 254.4e6),
    ("link.rate_bps", 50e6, 200e6),
    ("irq.entry_s", 11e-6, 2.75e-6),
    ("syscall.entry_s", 4e-6, 1e-6),     # dp_read/dp_write do not use it: equal allowed
    ("sched.wakeup_s", 16e-6, 4e-6),
    ("callgate.entry_s", 1e-6, 0.25e-6),
])
def test_costlier_hardware_never_lowers_the_round_trip(key, slower, faster):
    base = rtt_us()
    slow = rtt_us(params=[(key, slower)])
    fast = rtt_us(params=[(key, faster)])
    for s in base:
        assert not_above(fast[s], base[s]) and not_above(base[s], slow[s]), (key, s)


@pytest.mark.parametrize("key,slower,faster", [
    ("mem.copy_rate_Bps", 25e6, 100e6),
    ("pci.dma_rate_Bps", 63.6e6, 254.4e6),
    ("link.rate_bps", 50e6, 200e6),
])
def test_data_rates_matter_for_large_messages(key, slower, faster):
    base = rtt_us(sizes=(1500,))[1500]
    assert rtt_us(sizes=(1500,), params=[(key, faster)])[1500] < base * (1 - SLACK)
    assert rtt_us(sizes=(1500,), params=[(key, slower)])[1500] > base * (1 + SLACK)


def test_slower_link_hurts_large_messages_more():
    fast = rtt_us(sizes=(1, 1500))
    slow = rtt_us(sizes=(1, 1500), params=[("link.rate_bps", 10e6)])
    assert slow[1] > fast[1]
    assert slow[1500] - fast[1500] > slow[1] - fast[1]


def test_cable_propagation_adds_exactly_twice_per_round_trip():
    base = rtt_us()
    longer = rtt_us(params=[("link.propagation_s", 0.1e-6 + 10e-6)])
    for s in base:
        assert longer[s] - base[s] == pytest.approx(20.0, abs=0.05)


def test_shorter_bursts_slow_large_transfers():
    base = rtt_us(sizes=(1500,))[1500]
    short = rtt_us(sizes=(1500,), dec={"burst_longwords": 1})[1500]
    assert base * (1 + SLACK) < short


def test_unlimited_bursts_do_not_slow_large_transfers():
    """CSR0 PBL=0 lifts the cap on a DMA burst; on an otherwise idle bus that cannot make
    a frame reach host memory later than 32-longword bursts do."""
    base = rtt_us(sizes=(1500,))[1500]
    unlimited = rtt_us(sizes=(1500,), dec={"burst_longwords": 0})[1500]
    assert not_above(unlimited, base)


def test_call_gate_write_is_cheaper_than_the_generic_write():
    """dp_write enters through the call gate, write() through int 0x80 and the VFS:
    the difference is exactly syscall.entry_s + syscall.vfs_s - callgate.entry_s."""
    c = Cluster(nodes=2)
    a, b = c.process(0), c.process(1)
    p = c.profile

    async def main():
        fa = await a.dp_open(1)
        await a.dp_target(fa, 1, 2)
        await b.dp_open(2)
        await trio.sleep(0.001)
        t0 = a.now()
        await a.dp_write(fa, bytes(100))
        gate = a.now() - t0
        await trio.sleep(0.001)           # let the frame and its interrupts pass
        t0 = a.now()
        await a.write(fa, bytes(100))
        generic = a.now() - t0
        return gate, generic

    gate, generic = c.run(main)
    assert gate > 0
    expected = p["syscall.entry_s"] + p["syscall.vfs_s"] - p["callgate.entry_s"]
    assert generic - gate == pytest.approx(expected, rel=1e-6)


# --------------------------------------------------------------------------- determinism


def test_same_inputs_give_identical_results():
    runs = [Cluster(nodes=2, seed=3).run_spmd(pingpong, [1, 512], 10) for _ in range(8)]
    assert all(r == runs[0] for r in runs), sorted({r[0][0]["rtt_us"] for r in runs})
    bws = [Cluster(nodes=2, seed=3).run_spmd(stream(bandwidth, 100), [64]) for _ in range(4)]
    assert all(b == bws[0] for b in bws)


@pytest.mark.parametrize("bench", ["pingpong", "bandwidth"])
def test_same_seed_same_json(capsys, bench):
    argv = [bench, "--sizes", "1,1500", "--iters", "30", "--seed", "7", "--json"]
    docs = []
    for _ in range(4):
        assert main(argv) == 0
        docs.append(json.loads(capsys.readouterr().out))
    assert all(d == docs[0] for d in docs), [d["results"][0] for d in docs]
    assert docs[0]["results"] and docs[0]["time"] == "modeled"


# --------------------------------------------------------------------------- sync == async


MESSAGES = [b"a", b"hello, directed point", bytes(range(256)), bytes(1500), b"\xff" * 64, b""]
EP0, EP1 = 0x1234, 0x4321


def _reply(m: bytes) -> bytes:
    return (b"!" + m[::-1])[:1500]


def _sync_script(c):
    a, b = c.process(0), c.process(1)
    fa = a.sync.dp_open(EP0)
    a.sync.dp_target(fa, 1, EP1)
    fb = b.sync.dp_open(EP1)
    b.sync.dp_target(fb, 0, EP0)
    got0, got1 = [], []
    for m in MESSAGES:
        a.sync.dp_write(fa, m)
        got1.append(b.sync.dp_read(fb, 2000))
        b.sync.dp_write(fb, _reply(got1[-1]))
        got0.append(a.sync.dp_read(fa, 2000))
    return [got0, got1]


async def _async_script(dp, rank, size):
    me, peer = (EP0, EP1) if rank == 0 else (EP1, EP0)
    fd = await dp.dp_open(me)
    await dp.dp_target(fd, 1 - rank, peer)
    await trio.sleep(0.001)              # both endpoints open before any message
    got = []
    for m in MESSAGES:
        if rank == 0:
            await dp.dp_write(fd, m)
            got.append(await dp.dp_read(fd, 2000))
        else:
            got.append(await dp.dp_read(fd, 2000))
            await dp.dp_write(fd, _reply(got[-1]))
    return got


def test_same_script_sync_and_async_receives_the_same_bytes():
    sync_got = _sync_script(Cluster(nodes=2))
    async_got = Cluster(nodes=2).run_spmd(_async_script)
    assert sync_got == async_got
    assert async_got[1] == MESSAGES
    assert async_got[0] == [_reply(m) for m in MESSAGES]
