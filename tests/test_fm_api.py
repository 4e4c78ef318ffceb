"""The FM 2.x API over Myrinet and over the shared-memory transport (modeled): streams
gathered from pieces and scattered into handlers' buffers, handlers suspended across
packets, misuse, malformed packets and unknown handlers."""
from __future__ import annotations

import errno

import pytest

from libdp import Cluster
from libdp._fm_bench import run_job
from libdp.fm import FM, HandlerRuleError

JOBS = {"myrinet": (2, (0, 1)), "smt": (1, (0, 0))}


def job(transport, **fm):
    nodes, placement = JOBS[transport]
    return Cluster(nodes=nodes, platform="hpvm19", nic="myrinet", load=[("fm", fm)]), placement


def pattern(n, seed=0):
    return bytes((i * 7 + seed) & 0xFF for i in range(n))


@pytest.mark.parametrize("transport", ["myrinet", "smt"])
def test_gathered_pieces_arrive_scattered_into_the_handlers_buffers(transport):
    c, placement = job(transport)
    sizes = [0, 1, 2047, 2048, 2049, 5000, 20000]
    got = {}

    async def prog(dp, vnode, placement):
        fm = await FM.open(dp, 3, placement, vnode)

        async def on_msg(stream, src):
            # scatter: small pieces first, then the rest into a buffer of our own
            head = await stream.receive(min(10, stream.length))
            buf = bytearray(stream.length - len(head))
            n = await stream.receive_into(buf)
            assert await stream.receive(5) == b""                       # nothing past the end
            got[stream.length] = (src, head + bytes(buf[:n]))

        fm.set_handler(9, on_msg)
        if vnode == 0:
            for k, n in enumerate(sizes):
                data = pattern(n, k)
                s = await fm.begin_message(1, n, 9)
                for at in range(0, n, 777):                             # gather from 777-byte pieces
                    await fm.send_piece(s, data[at:at + 777])
                await fm.end_message(s)
        else:
            await fm.extract_until(lambda: len(got) == len(sizes))
        await fm.close()

    run_job(c, prog, placement)
    for k, n in enumerate(sizes):
        assert got[n] == (0, pattern(n, k))


@pytest.mark.parametrize("transport", ["myrinet", "smt"])
def test_a_handler_that_wants_more_than_has_arrived_waits_for_the_next_packet(transport):
    c, placement = job(transport)
    seen = []

    async def prog(dp, vnode, placement):
        fm = await FM.open(dp, 3, placement, vnode)

        async def on_msg(stream, src):
            seen.append(("start", stream.length))
            a = await stream.receive(3000)                              # spans the first two packets
            seen.append(("got", len(a)))
            b = await stream.receive(stream.length)
            seen.append(("rest", len(b)))

        fm.set_handler(1, on_msg)
        if vnode == 0:
            await fm.send(1, 1, bytes(6000))
        else:
            await fm.extract_until(lambda: len(seen) == 3)
            assert fm.stats()["packets_received"] == 3
        await fm.close()

    run_job(c, prog, placement)
    assert seen == [("start", 6000), ("got", 3000), ("rest", 3000)]


@pytest.mark.parametrize("transport", ["myrinet", "smt"])
def test_what_a_handler_leaves_is_dropped_and_the_next_message_is_whole(transport):
    c, placement = job(transport)
    got = []

    async def prog(dp, vnode, placement):
        fm = await FM.open(dp, 3, placement, vnode)

        async def first_bytes(stream, src):
            got.append(await stream.receive(4))

        fm.set_handler(1, first_bytes)
        if vnode == 0:
            await fm.send(1, 1, pattern(9000, 1))
            await fm.send(1, 1, pattern(9000, 2))
        else:
            await fm.extract_until(lambda: len(got) == 2 and fm.stats()["packets_received"] == 10)
            assert fm.stats()["dropped_after_handler"] == 8
        await fm.close()

    run_job(c, prog, placement)
    assert got == [pattern(9000, 1)[:4], pattern(9000, 2)[:4]]


def test_misuse_of_the_stream_api_is_an_oserror_and_loses_nothing():
    c, placement = job("myrinet")
    got = []

    async def prog(dp, vnode, placement):
        fm = await FM.open(dp, 3, placement, vnode)

        async def on_msg(stream, src):
            got.append(await stream.receive(stream.length))

        fm.set_handler(1, on_msg)
        if vnode == 0:
            s = await fm.begin_message(1, 10, 1)
            await fm.send_piece(s, b"12345")
            with pytest.raises(OSError) as e:
                await fm.send_piece(s, b"1234567")                      # past the declared length
            assert e.value.errno == errno.EMSGSIZE
            with pytest.raises(OSError) as e:
                await fm.end_message(s)                                 # 5 of 10 bytes: the stream stays open
            assert e.value.errno == errno.EINVAL
            with pytest.raises(OSError) as e:
                await fm.begin_message(1, 3, 1)                         # one open message per node
            assert e.value.errno == errno.EBUSY
            await fm.send_piece(s, b"67890")
            await fm.end_message(s)
            with pytest.raises(OSError) as e:
                await fm.send_piece(s, b"x")                            # a piece after end
            assert e.value.errno == errno.EBADF
            for dest, length, handler, err in ((7, 1, 1, errno.EHOSTUNREACH), (0, 1, 1, errno.EINVAL),
                                               (1, -1, 1, errno.EMSGSIZE), (1, 1, 5000, errno.EINVAL)):
                with pytest.raises(OSError) as e:
                    await fm.begin_message(dest, length, handler)
                assert e.value.errno == err
            with pytest.raises(OSError) as e:
                await fm.extract(0)
            assert e.value.errno == errno.EINVAL
        else:
            await fm.extract_until(lambda: got)
        await fm.close()

    run_job(c, prog, placement)
    assert got == [b"1234567890"]


def test_handlers_receive_only():
    c, placement = job("myrinet")
    errors = []

    async def prog(dp, vnode, placement):
        fm = await FM.open(dp, 3, placement, vnode)

        async def sender(stream, src):
            try:
                fm.ctx.begin(0, 1, 1)
            except HandlerRuleError as e:
                errors.append(e.errno)

        async def sleeper(stream, src):
            import trio
            await trio.sleep(1)

        fm.set_handler(1, sender)
        fm.set_handler(2, sleeper)
        if vnode == 0:
            await fm.send(1, 1, b"a")
            await fm.send(1, 2, b"b")
        else:
            await fm.extract_until(lambda: errors)
            with pytest.raises(HandlerRuleError) as e:
                await fm.extract_until(lambda: False)
            errors.append(e.value.errno)
        await fm.close()

    run_job(c, prog, placement)
    assert errors == [errno.EDEADLK, errno.EINVAL]


def test_unknown_handlers_and_malformed_packets_are_dropped_and_counted():
    c, placement = job("myrinet")
    got = []

    async def prog(dp, vnode, placement):
        fm = await FM.open(dp, 3, placement, vnode)

        async def on_msg(stream, src):
            got.append(await stream.receive(stream.length))

        fm.set_handler(1, on_msg)
        if vnode == 0:
            await fm.send(1, 77, bytes(5000))                          # nobody handles 77: 3 packets dropped
            await fm.send(1, 1, b"after")
        else:
            # garbage from the wire: a header claiming more data than the packet has
            card = c.node(dp.nid).pci_devices[0]
            bad = bytearray(40)
            bad[0:2] = (0x0F4D).to_bytes(2, "big")
            bad[2] = 1
            bad[14:16] = (100).to_bytes(2, "big")
            card.rx_frame(bytes(bad), True)
            card.rx_frame(b"\x0f\x4d", True)                          # a runt
            await fm.extract_until(lambda: got)
            st = fm.stats()
            assert st["dropped_unknown_handler"] == 1 and st["messages_received"] == 1
            lcp = c.node(dp.nid).services["fm"].board.lcp.stats()
            assert lcp["bad_length"] == 1 and lcp["runt"] == 1
        await fm.close()

    run_job(c, prog, placement)
    assert got == [b"after"]


def test_the_blocking_api():
    import trio

    c, placement = job("smt")
    procs = [c.process(0), c.process(0)]
    out = []

    async def both():                  # FM_initialize waits for the whole job: open both in modeled time
        res = [None, None]

        async def one(v):
            res[v] = await FM.open(procs[v], 4, placement, v)

        async with trio.open_nursery() as n:
            n.start_soon(one, 0)
            n.start_soon(one, 1)
        return res

    fa, fb = c.run(both)

    async def h(stream, src):
        out.append(await stream.receive(stream.length))

    fb.sync.set_handler(2, h)
    fa.sync.send(1, 2, b"sync")
    fb.sync.extract_until(lambda: out)
    s = fa.sync.begin_message(1, 4, 2)
    fa.sync.send_piece(s, b"ab")
    fa.sync.send_piece(s, b"cd")
    fa.sync.end_message(s)
    assert fb.sync.extract() == 1
    fa.sync.close()
    fb.sync.close()
    assert out == [b"sync", b"abcd"]


def test_a_job_over_both_transports_polls_one_after_the_other():        # FM-C08
    c = Cluster(nodes=2, platform="hpvm19", nic="myrinet", load=["fm"])
    placement = (0, 0, 1)                                                 # two processes on host 0, one on host 1

    async def prog(dp, vnode, placement):
        fm = await FM.open(dp, 7, placement, vnode)
        got = []

        async def on_msg(stream, src):
            got.append((src, await stream.receive(stream.length)))

        fm.set_handler(1, on_msg)
        for dest in range(3):
            if dest != vnode:
                await fm.send(dest, 1, b"from %d" % vnode)
        await fm.extract_until(lambda: len(got) == 2)
        ctx = fm.ctx
        both = ctx.poll_round() == pytest.approx(ctx.c.poll + ctx.c.smt_poll * ctx.smt.region.nqueues) \
            if ctx.smt is not None else ctx.poll_round() == pytest.approx(ctx.c.poll)
        st = fm.stats()
        await fm.close()
        return sorted(got), st, both

    results = run_job(c, prog, placement)
    for vnode, (got, st, both) in enumerate(results):
        assert got == [(s, b"from %d" % s) for s in range(3) if s != vnode]
        assert both
    for vnode in (0, 1):                                                  # one message by each transport
        st = results[vnode][1]
        assert {p["transport"] for p in st["peers"].values()} == {"smt", "net"}
        assert st["smt"]["frames_received"] == 1 and st["net"]["consumed"] == 1
    assert "smt" not in results[2][1] and results[2][1]["net"]["consumed"] == 2
