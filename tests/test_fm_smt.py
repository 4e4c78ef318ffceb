"""FM's shared-memory transport: the lock-free queues (FM-C09..C12) on their own, modeled
between two processes of one host, and real between real OS processes -- including one
that dies holding a frame, and one killed between publishing steps 5 and 6."""
from __future__ import annotations

import errno
import multiprocessing
import os
import time

import pytest

from libdp import Cluster
from libdp._fm_bench import fm_pingpong_program, real_smt_pingpong, run_job
from libdp.fm import FM
from protocols.fm._smt import SmtRegion, layout_bytes

FRAME = 2080


def region(nproc=3, m=1, frames=8):
    buf = bytearray(layout_bytes(nproc, m, frames, FRAME))
    r = SmtRegion(buf, nproc, m, frames, FRAME, True)
    return r, [r.attach(i, 100 + i, 0) for i in range(nproc)]


def send(r, rid, me, data):
    idx = r.claim(rid, me)
    assert idx >= 0
    r.fill(rid, idx, 0, data)
    r.publish(rid, me, idx, len(data))
    return idx


def recv(r, me):
    idx = r.poll(me)
    if idx < 0:
        return None
    r.take(me, r.last_queue)
    data = r.copy_out(me, idx, 0, r.frame_len(me, idx))
    r.release(me, idx)
    return data


def test_send_and_receive_steps_and_credits_back():
    r, (a, b, c) = region()
    send(r, c, a, b"from a")
    send(r, c, b, b"from b")
    assert [recv(r, c), recv(r, c), recv(r, c)] == [b"from a", b"from b", None]
    assert r.consumed(c, a) == 1 and r.consumed(c, b) == 1
    assert r.lookup(1) == b and r.lookup(7) == -1


def test_a_claimed_frame_is_skipped_by_the_next_claim_and_the_free_list_wraps():
    r, (a, b, c) = region(frames=4)
    held = r.claim(c, a)                                    # a sender descheduled between steps 3 and 4
    for i in range(10):                                     # others go round the free list past it
        send(r, c, b, bytes([i]))
        assert recv(r, c) == bytes([i])
    assert r.frames_held_by(c, a) == [held]
    r.fill(c, held, 0, b"late")                             # it wakes up and finishes: nothing was corrupted
    r.publish(c, a, held, 4)
    assert recv(r, c) == b"late"


def test_all_frames_claimed_means_no_frame():
    r, (a, b, c) = region(frames=2)
    assert r.claim(c, a) >= 0 and r.claim(c, b) >= 0
    assert r.claim(c, a) == -1 and r.last_tries == 4


@pytest.mark.parametrize("m", [1, 2, 3])
def test_sender_i_uses_queue_i_mod_m(m):
    r, ids = region(nproc=3, m=m)
    send(r, 2, 0, b"x")
    send(r, 2, 1, b"y")
    heads = [r.queue_state(2, q)[1] for q in range(m)]
    assert heads == [sum(1 for s in (0, 1) if s % m == q) for q in range(m)]
    assert sorted([recv(r, 2), recv(r, 2)]) == [b"x", b"y"]


def test_reclaim_gives_back_what_a_dead_process_held_and_skips_its_hole():
    r, (a, b, c) = region()
    held = r.claim(c, a)                                    # a claimed a frame, never published it
    r.fault_fetch_tail_only(c, a)                           # ... and died between steps 5 and 6
    send(r, c, b, b"after the hole")
    assert recv(r, c) is None                               # the hole blocks the queue's head
    assert r.reclaim(c, a) == (0, 0)                        # alive: nothing is taken from it
    assert r.mark_dead(a) and r.lookup(0) == -1
    frames, holes = r.reclaim(c, a)
    assert (frames, holes) == (1, 1) and r.frames_held_by(c, a) == []
    assert recv(r, c) == b"after the hole"
    assert held not in r.frames_held_by(c, b)


def test_bad_geometry_and_a_buffer_without_a_region_are_errors():
    with pytest.raises(OSError) as e:
        SmtRegion(bytearray(1 << 20), 2, 1, 6, FRAME, True)           # not a power of two
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        SmtRegion(bytearray(4096))
    assert e.value.errno == errno.EINVAL
    r, (a, b, c) = region()
    with pytest.raises(OSError) as e:
        r.attach(0, 999, 0)                                           # instance 0 is live
    assert e.value.errno == errno.EADDRINUSE
    r.close()
    with pytest.raises(OSError) as e:
        r.poll(0)
    assert e.value.errno == errno.EBADF


# -- modeled: two processes of one host, on its two CPUs -----------------------------------


@pytest.mark.parametrize("queues", [1, 0])
def test_modeled_two_processes_ping_pong_on_two_cpus(queues):
    c = Cluster(nodes=1, platform="hpvm19", nic="myrinet", load=[("fm", {"smt_queues": queues})])
    (rows, stats), _ = run_job(c, fm_pingpong_program, (0, 0), (0, 100), 20)
    assert 1.0 < rows[0]["one_way_us"] < rows[1]["one_way_us"]
    node = c.nodes[0]
    assert node.cpus[0].busy_proc_s > 0 and node.cpus[1].busy_proc_s > 0
    assert stats["smt"]["queues"] == (1 if queues == 1 else 8)


def test_a_dearer_atomic_instruction_slows_the_modeled_transport():
    def one_way(cycles):
        c = Cluster(nodes=1, platform="hpvm19", nic="myrinet", params=[("cpu.atomic_cycles", cycles)], load=["fm"])
        (rows, _), _ = run_job(c, fm_pingpong_program, (0, 0), (0,), 20)
        return rows[0]["one_way_us"]

    assert one_way(280) > one_way(28) + 0.5


# -- real: real processes over POSIX shared memory -------------------------------------------


def test_real_processes_ping_pong_over_shared_memory():
    rows, stats = real_smt_pingpong((8, 3000), iters=200, warmup=10)
    assert [r["size"] for r in rows] == [8, 3000] and all(r["rtt_us"] > 0 for r in rows)
    for node in stats.values():
        assert node["messages_received"] == 2 * 210 and node["smt"]["frames_received"] == 210 + 420


def _dying_sender(name, ready, go):
    fm = FM.open_real(1, 2, 7, smt_name=name)
    r, me = fm.ctx.smt.region, fm.ctx.smt.me
    rid = r.lookup(0)
    r.claim(rid, me)                                      # holds a frame of node 0's...
    r.fault_fetch_tail_only(rid, me)                      # ... and a position of its queue
    ready.set()
    go.wait(30)
    os._exit(0)                                           # dies without a word


def test_a_real_process_that_dies_holding_a_frame_is_detected_and_its_frames_reclaimed():
    name = f"/dp-fm-test-{os.getpid()}"
    ctx = multiprocessing.get_context("fork")
    ready, go = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_dying_sender, args=(name, ready, go), daemon=True)
    child.start()
    try:
        fm = FM.open_real(0, 2, 7, smt_name=name)
        assert ready.wait(30)
        r, me = fm.ctx.smt.region, fm.ctx.smt.me
        assert len(r.frames_held_by(me, 1 - me)) == 1
        assert fm.ctx.smt.reclaim() == 0                  # alive: nothing is taken from it
        go.set()
        child.join(10)
        assert fm.ctx.smt.reclaim() == 2                  # its frame, and its hole in my queue
        assert r.frames_held_by(me, 1 - me) == []
        st = fm.stats()["smt"]
        assert st["reclaimed_frames"] == 1 and st["skipped_positions"] == 1
        with pytest.raises(OSError) as e:
            fm.sync.send(1, 1, b"anyone?")
        assert e.value.errno in (errno.EPIPE,)
        fm.sync.close()
    finally:
        go.set()
        child.join(5)
        try:
            import _posixshmem
            _posixshmem.shm_unlink(name)
        except OSError:
            pass
    assert not os.path.exists(f"/dev/shm{name}")


# -- real: the caller's own poll (SyncFM over shared memory alone) --------------------------


def _two_real_nodes(name, **params):
    """Nodes 0 and 1 of one job, both in this process (each its own real node): the
    real-time shared-memory path without a second process, so each step is visible."""
    from libdp.fm import real_node

    fms = []
    for v in range(2):
        dp = real_node({"smt_name": name, **params})
        args = (7, (dp.nid, dp.nid), v)
        fd = dp.sync._call(lambda e, dp=dp, args=args: dp._node.syscall_path(dp._proc, "fm_open", args, e), None, 0.0)
        fms.append(FM(dp, fd))
    assert all(fm.ctx.peers_ready() for fm in fms)
    return fms


@pytest.fixture
def real_pair():
    name = f"/dp-fm-pair-{os.getpid()}"
    fms = _two_real_nodes(name)
    yield fms
    for fm in fms:
        fm.sync.close()


def test_real_whole_messages_take_the_c_path_and_streams_the_general_one(real_pair):
    a, b = real_pair
    got = []

    async def h(stream, src):
        got.append((src, await stream.receive(stream.length)))

    b.set_handler(3, h)
    a.sync.send(1, 3, b"short")                                   # one packet: SmtPort.send_now
    a.sync.send(1, 3, bytearray(range(256)) * 12)                 # 3072 bytes: two packets, general path
    s = a.sync.begin_message(1, 6, 3)
    a.sync.send_piece(s, b"abc")
    a.sync.send_piece(s, b"def")
    a.sync.end_message(s)
    b.sync.extract_until(lambda: len(got) == 3)
    assert got == [(0, b"short"), (0, bytes(range(256)) * 12), (0, b"abcdef")]
    sa, sb = a.stats(), b.stats()
    assert sa["messages_sent"] == 3 and sa["packets_sent"] == 4 and sa["bytes_sent"] == 5 + 3072 + 6
    assert sb["messages_received"] == 3 and sb["packets_received"] == 4 and sb["handlers_run"] == 3


def test_real_c_path_drops_and_counts_unknown_handlers_and_malformed_frames(real_pair):
    a, b = real_pair
    got = []

    async def h(stream, src):
        got.append(await stream.receive(stream.length))

    b.set_handler(1, h)
    a.sync.send(1, 9, b"nobody")                                  # no handler 9 at node 1
    port = a.ctx.smt
    peer = a.ctx.peers[1]
    idx = port.claim(peer)                                        # a frame of garbage, published by hand
    port.region.fill(peer.rid, idx, 0, b"\xff" * 40)
    port.region.publish(peer.rid, port.me, idx, 40)
    a.sync.send(1, 1, b"fine")
    b.sync.extract_until(lambda: got)
    assert got == [b"fine"]
    st = b.stats()
    assert st["dropped_unknown_handler"] == 1 and st["dropped_malformed"] == 1
    assert b.ctx.smt.region.frames_held_by(b.ctx.smt.me, a.ctx.smt.me) == []     # every frame released


def test_real_handler_rules_hold_on_the_c_path(real_pair):
    a, b = real_pair
    seen = []

    async def sends(stream, src):
        try:
            b.sync.send(0, 1, b"no")
        except OSError as e:
            seen.append(e.errno)
        await stream.receive(stream.length)

    b.set_handler(1, sends)
    a.sync.send(1, 1, b"x")
    b.sync.extract()
    assert seen == [errno.EDEADLK]


def _both_send(fm, vnode, sizes, count, _warmup):
    got = [0]

    async def h(stream, src):
        await stream.receive(stream.length)
        got[0] += 1

    fm.set_handler(1, h)
    for i in range(count):
        fm.sync.send(1 - vnode, 1, i.to_bytes(4, "little"))
    fm.sync.extract_until(lambda: got[0] == count)
    return [{"got": got[0], "credit_waits": fm.stats()["credit_waits"]}]


def test_two_real_processes_sending_past_their_credits_to_each_other_both_finish():
    from libdp._fm_bench import _real_job

    count = 1000                                                  # far past 64 credits each way
    rows, stats = _real_job(_both_send, (), count, 0, 60.0, {"smt_frames": 128})
    assert rows == [{"got": count, "credit_waits": stats["node0"]["credit_waits"]}]
    for node in stats.values():
        assert node["messages_received"] == count and node["messages_sent"] == count
        assert node["peers"][1 - node["vnode"]]["in_flight"] <= node["peers"][1 - node["vnode"]]["credits"]
    assert stats["node0"]["credit_waits"] + stats["node1"]["credit_waits"] > 0


def test_real_messages_of_several_packets_up_to_the_credits_go_whole_and_longer_ones_stream():
    a, b = _two_real_nodes(f"/dp-fm-pk-{os.getpid()}", smt_frames=8)       # 8 credits for the one peer
    try:
        got = []

        async def h(stream, src):
            got.append(await stream.receive(stream.length))

        b.set_handler(1, h)
        small = bytes(range(256)) * 24                                    # 6144 bytes: 3 packets, the C path
        large = bytes(reversed(range(256))) * 80                          # 20480 bytes: 10 packets > 8 credits
        a.sync.send(1, 1, small)
        assert a.ctx.smt.n_packets_sent == 3 and a.stats()["packets_sent"] == 3
        b.sync.extract_until(lambda: len(got) == 1)
        for _ in range(2):                                                # 6 of 8 credits held...
            a.sync.send(1, 1, small)
        assert a.ctx.core.send_now(1, 1, small) == 0                      # ...so 3 more must wait
        b.sync.extract_until(lambda: len(got) == 3)
        a.sync.send(1, 1, small)
        b.sync.extract_until(lambda: len(got) == 4)
        import threading
        t = threading.Thread(target=lambda: b.sync.extract_until(lambda: len(got) == 5))
        t.start()                                                         # the receiver drains as it goes
        a.sync.send(1, 1, large)                                          # the general path, packet by packet
        t.join(30)
        assert got == [small] * 4 + [large]
        sa = a.stats()
        assert sa["messages_sent"] == 5 and sa["packets_sent"] == 4 * 3 + 10
        assert a.ctx.smt.region.frames_held_by(b.ctx.smt.me, a.ctx.smt.me) == []
    finally:
        for fm in (a, b):
            fm.sync.close()
