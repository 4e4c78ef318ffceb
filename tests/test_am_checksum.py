"""AM's end-to-end checksum (issue 11): damage the link CRC cannot see.

`SilentMutation` changes one byte of 5% of the packets on the switch and leaves their
CRC valid. With ``am.checksum=1`` every damaged packet that reaches AM is dropped before
a field of it is read, counted, and resent: 2,000 messages arrive exactly once, in
order, intact. With the checksum off (the paper's protocol) the damage reaches handlers
and the run says so: the harness's checks, its failure and the counters show every
message that did not arrive intact; nothing goes missing without a word.
"""
from __future__ import annotations

import json

import pytest

from libdp import Cluster
from libdp._am_stress import run_stress
from libdp._cli import main
from libdp.am import AM
from protocols.am import _wire as W

RUN = dict(nodes=4, messages=2_000, max_store=10_240, seed=5, faults={}, mutate=0.05, deadline_s=30.0)


def test_with_the_checksum_every_damaged_packet_is_dropped_and_resent():
    out = run_stress(**RUN, am_params={"checksum": True})
    assert out["ok"] and out["arrived_once_intact"] == out["messages"] == 2_000, (out["failure"], out["errors"])
    mutated, caught = out["faults"]["mutated"], out["am"]["checksum_errors"]
    assert mutated > 0.04 * out["am"]["packets_sent"]
    # The checksum covers source, destination, AM header and data: most damage lands there.
    # The rest hit the TB2 header (the adapter drops a bad length or destination; a bad
    # protocol id is AM's bad_proto) or bytes nothing reads (route, status).
    assert 0.6 * mutated < caught <= mutated
    dropped_elsewhere = out["adapters"]["rx_malformed"] + out["adapters"]["rx_misrouted"] + out["malformed"]["bad_proto"]
    assert caught + dropped_elsewhere <= mutated
    # No damaged header was ever parsed: nothing malformed but what the checksum does not cover.
    assert {k for k, v in out["malformed"].items() if v} <= {"bad_proto"}
    assert out["am"]["retransmitted_packets"] > caught


def test_without_the_checksum_the_damage_shows():
    out = run_stress(**RUN)
    assert not out["ok"] and out["am"]["checksum_errors"] == 0 and out["faults"]["mutated"] > 0
    lost = out["messages"] - out["arrived_once_intact"]
    assert lost > 0
    # Every message that did not arrive intact is accounted for: a handler saw it damaged
    # (errors), a call failed because of it (failure), or a receiver still lacks it (missing).
    assert out["error_count"] > 0 and (out["failure"] or out["missing"])
    assert any("differ" in e or "arrived as" in e or "unexpected" in e for e in out["errors"])
    # The protocol's counters show the damaged headers it dropped or refused.
    assert sum(out["malformed"].values()) + out["am"]["rejects_sent"] > 0


def test_the_checksum_costs_time_only_when_on():
    """One-word round trip and a 1 MB store: the checksum's per-packet and per-byte cycles
    are charged at both ends when it is on (and a bulk packet carries 220 bytes, not 224)."""
    def run(checksum):
        c = Cluster(nodes=2, nic="tb2", load=[("am", {"checksum": checksum})])

        async def prog(dp, rank, size):
            am = await AM.open(dp)
            seg = am.segment(1 << 20)
            got = []
            am.set_handler(1, lambda tok, x: tok.reply(2, x))
            am.set_handler(2, lambda tok, x: got.append(x))
            am.set_handler(3, lambda tok, a, n, arg: got.append(n))
            if rank == 0:
                await am.am_request_1(1, 1, 7)
                await am.poll_until(lambda: got)
                t0 = dp.now()
                await am.am_request_1(1, 1, 8)
                await am.poll_until(lambda: len(got) == 2)
                rtt = dp.now() - t0
                t0 = dp.now()
                await am.am_store(1, seg, seg.addr, 1 << 20, 3, 0)
                bulk = dp.now() - t0
                await am.am_request_1(1, 1, 9)
                await am.poll_until(lambda: len(got) == 3)
            else:
                await am.poll_until(lambda: len(got) == 1)
            st = am.stats()
            await am.close()
            return (rtt, bulk, st["packets_sent"]) if rank == 0 else None
        return c.run_spmd(prog)[0]

    rtt0, bulk0, pk0 = run(False)
    rtt1, bulk1, pk1 = run(True)
    assert rtt1 > rtt0 and bulk1 > bulk0
    assert pk1 > pk0                          # 220 data bytes a packet: more packets for the same megabyte


def test_am_stress_takes_mutate_and_checksum(capsys):
    args = ["am-stress", "--nodes", "2", "--messages", "300", "--max-store", "4096", "--mutate", "0.05",
            "--param", "fault.loss=0", "--json"]
    assert main(args + ["--checksum"]) == 0
    doc = json.loads(capsys.readouterr().out)
    row = doc["results"][0]
    assert row["arrived_once_intact"] == 300 and row["checksum_errors"] > 0
    assert doc["mutate"] == 0.05 and doc["faults_injected"]["mutated"] > 0
    assert main(args) == 1                    # off: the damage is reported in one line
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "did not arrive exactly once intact" in err
    with pytest.raises(SystemExit):
        main(["am-stress", "--mutate", "1.5"])
    assert "a probability is between 0 and 1" in capsys.readouterr().err


@pytest.mark.parametrize("i", [0, 5, 15, 16, 40])
def test_any_one_byte_changed_is_caught(i):
    user = bytes(range(16))
    data = W.trailer(3, 4, user, bytes(range(100, 140)))
    assert W.verify(3, 4, user, data) and not W.verify(4, 3, user, data) and not W.verify(3, 4, user, data[:-1])
    for delta in (1, 0x80, 0xFF):
        if i < 16:
            bad = bytearray(user)
            bad[i] = (bad[i] + delta) & 0xFF
            assert not W.verify(3, 4, bytes(bad), data)
        else:
            bad = bytearray(data)
            bad[i - 16] = (bad[i - 16] + delta) & 0xFF
            assert not W.verify(3, 4, user, bytes(bad))
