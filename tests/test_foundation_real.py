"""Real mode: one OS process per node, frames over a shared-memory link.

Nothing here asserts a speed: real-mode figures are wall-clock and depend on the
host. Every run is bounded by `run_real_spmd`'s timeout so a failure cannot hang.
"""
from __future__ import annotations

import errno
import json

import pytest
import trio

import libdp
from libdp import Cluster
from libdp._cli import main
from libdp._realrun import run_real_spmd

TIMEOUT = 60.0


def test_real_pingpong_through_the_cli(capsys):
    rc = main(["pingpong", "--real", "--sizes", "1,64", "--iters", "50", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["time"] == "real"
    assert doc["platform"] == "p133" and doc["nic"] == "dec21140"
    assert [r["size"] for r in doc["results"]] == [1, 64]
    for r in doc["results"]:
        assert r["rtt_us"] > 0
        assert r["one_way_us"] == pytest.approx(r["rtt_us"] / 2)


def test_real_pingpong_through_run_real_spmd():
    results, stats = run_real_spmd(libdp.pingpong, [1, 64], 50, timeout=TIMEOUT)
    rows = results[0]
    assert [r["size"] for r in rows] == [1, 64]
    assert all(r["rtt_us"] > 0 for r in rows)
    assert results[1] is not None                  # rank 1 measured too
    assert set(stats) == {"node0", "node1"}
    for node in ("node0", "node1"):
        eth = stats[node]["eth0"]
        assert eth["tx_frames"] >= 60 and eth["rx_frames"] >= 60


def test_real_mode_rejects_a_run_without_nodes():
    with pytest.raises(OSError) as e:
        run_real_spmd(libdp.pingpong, [1], 1, nodes=0)
    assert e.value.errno == errno.EINVAL


def test_real_mode_validates_params_before_forking():
    with pytest.raises(OSError):
        run_real_spmd(libdp.pingpong, [1], 1, params=[("no.such.key", 1)])


# --------------------------------------------------------------------------- same script


EP = 0x7777
HELLO_WAIT_S = 0.05
MESSAGES = [b"a", b"hello, directed point", bytes(range(256)), bytes(1500), b"\xff" * 64, b"\x00" * 7]


def reply_to(m: bytes) -> bytes:
    return (b"!" + m[::-1])[:1500]


async def _read_data(dp, fd) -> bytes:
    """The next non-empty message (empty ones are handshake hellos)."""
    while True:
        m = await dp.dp_read(fd, 2000)
        if m:
            return m


async def _handshake(dp, fd, rank):
    """DP is unreliable: make sure the peer's endpoint is open before the data."""
    if rank == 0:
        while True:
            await dp.dp_write(fd, b"")
            with trio.move_on_after(HELLO_WAIT_S) as scope:
                await dp.dp_read(fd, 16)
            if not scope.cancelled_caught:
                return
    else:
        await dp.dp_read(fd, 16)
        await dp.dp_write(fd, b"")


async def exchange(dp, rank, size):
    """A small user program: rank 0 sends, rank 1 answers; each returns what it got."""
    fd = await dp.dp_open(EP)
    await dp.dp_target(fd, 1 - rank, EP)
    await _handshake(dp, fd, rank)
    got = []
    for m in MESSAGES:
        if rank == 0:
            await dp.dp_write(fd, m)
            got.append(await _read_data(dp, fd))
        else:
            got.append(await _read_data(dp, fd))
            await dp.dp_write(fd, reply_to(got[-1]))
    await dp.close(fd)
    return got


def test_same_script_same_bytes_in_modeled_and_real_mode():
    modeled = Cluster(nodes=2).run_spmd(exchange)
    real, _stats = run_real_spmd(exchange, timeout=TIMEOUT)
    assert modeled[1] == MESSAGES
    assert modeled[0] == [reply_to(m) for m in MESSAGES]
    assert real == modeled


def test_real_pingpong_over_udp_between_processes():
    """The same DP ping-pong with each frame a UDP datagram on loopback (how hosts are joined)."""
    results, stats = run_real_spmd(libdp.pingpong, [1, 1500], 30, timeout=TIMEOUT, transport="udp")
    rows = results[0]
    assert [r["size"] for r in rows] == [1, 1500]
    assert all(r["rtt_us"] > 0 for r in rows)
    assert results[1]["echoed"] >= 2 * (30 + 10)
    for node in ("node0", "node1"):
        assert stats[node]["eth0"]["rx_frames"] >= 2 * 30


def test_real_mode_refuses_an_unknown_transport():
    with pytest.raises(OSError) as e:
        run_real_spmd(libdp.pingpong, [1], 1, transport="carrier-pigeon")
    assert e.value.errno == errno.EINVAL
