"""The DP calls as a process sees them (libdp.DP, async and .sync), in modeled time.

Async tests run under pytest-trio on the cluster's EngineClock (fixtures `modeled`
and `model_clock` from conftest.py).
"""
from __future__ import annotations

import errno
import select
from types import SimpleNamespace

import pytest
import trio

from kernelsim import OpenFile
from libdp import Cluster

DP_MAX = 1500


def _readable(fd) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def _setup_fds(c: Cluster):
    """Process a on node 0 with every kind of fd an error case needs; b on node 1."""
    a, b = c.process(0), c.process(1)
    fds = SimpleNamespace()
    fds.targeted = a.sync.dp_open(1)
    a.sync.dp_target(fds.targeted, 1, 2)
    fds.untargeted = a.sync.dp_open(3)
    fds.empty_nb = a.sync.dp_open(4)           # non-blocking, nothing ever arrives
    a.sync.set_blocking(fds.empty_nb, False)
    fds.unknown = 987654
    fds.not_dp = a._proc.fds.install(OpenFile(c.node(0)))   # an open file that is not DP
    fds.peer = b.sync.dp_open(2)
    # Last: fd numbers are reused as in UNIX, so nothing may be opened after this close.
    closed = a.sync.dp_open(5)
    a.sync.close(closed)
    fds.closed = closed
    return a, b, fds


# (name, errno or BlockingIOError, call(api, fds)) -- api is a DP (async) or SyncDP.
ERROR_CASES = [
    ("dp_write_unknown_fd", errno.EBADF, lambda api, f: api.dp_write(f.unknown, b"x")),
    ("dp_write_closed_fd", errno.EBADF, lambda api, f: api.dp_write(f.closed, b"x")),
    ("write_closed_fd", errno.EBADF, lambda api, f: api.write(f.closed, b"x")),
    ("read_closed_fd", errno.EBADF, lambda api, f: api.read(f.closed, 10)),
    ("dp_read_closed_fd", errno.EBADF, lambda api, f: api.dp_read(f.closed, 10)),
    ("dp_read_token_unknown_fd", errno.EBADF, lambda api, f: api.dp_read_token(f.unknown)),
    ("dp_target_closed_fd", errno.EBADF, lambda api, f: api.dp_target(f.closed, 1, 2)),
    ("close_closed_fd", errno.EBADF, lambda api, f: api.close(f.closed)),
    ("close_unknown_fd", errno.EBADF, lambda api, f: api.close(f.unknown)),
    ("dp_write_before_target", errno.EDESTADDRREQ, lambda api, f: api.dp_write(f.untargeted, b"x")),
    ("write_before_target", errno.EDESTADDRREQ, lambda api, f: api.write(f.untargeted, b"x")),
    ("dp_write_too_long", errno.EMSGSIZE, lambda api, f: api.dp_write(f.targeted, bytes(DP_MAX + 1))),
    ("write_too_long", errno.EMSGSIZE, lambda api, f: api.write(f.targeted, bytes(4000))),
    ("target_nid_not_in_nart", errno.EHOSTUNREACH, lambda api, f: api.dp_target(f.untargeted, 2, 1)),
    ("target_nid_65535", errno.EHOSTUNREACH, lambda api, f: api.dp_target(f.untargeted, 65535, 1)),
    ("target_nid_negative", errno.EINVAL, lambda api, f: api.dp_target(f.untargeted, -1, 1)),
    ("target_ep_out_of_range", errno.EINVAL, lambda api, f: api.dp_target(f.untargeted, 1, 65536)),
    ("open_in_use", errno.EADDRINUSE, lambda api, f: api.dp_open(1)),
    ("open_65536", errno.EINVAL, lambda api, f: api.dp_open(65536)),
    ("open_negative", errno.EINVAL, lambda api, f: api.dp_open(-1)),
    ("open_str", errno.EINVAL, lambda api, f: api.dp_open("7")),
    ("open_float", errno.EINVAL, lambda api, f: api.dp_open(7.0)),
    ("open_bool", errno.EINVAL, lambda api, f: api.dp_open(True)),
    ("dp_read_nothing_nonblocking", BlockingIOError, lambda api, f: api.dp_read(f.empty_nb, 10)),
    ("dp_read_token_nothing_nonblocking", BlockingIOError, lambda api, f: api.dp_read_token(f.empty_nb)),
    ("read_nothing_nonblocking", BlockingIOError, lambda api, f: api.read(f.empty_nb, 10)),
    ("dp_write_str", errno.EFAULT, lambda api, f: api.dp_write(f.targeted, "text")),
    ("dp_write_int", errno.EFAULT, lambda api, f: api.dp_write(f.targeted, 42)),
    ("dp_write_none", errno.EFAULT, lambda api, f: api.dp_write(f.targeted, None)),
    ("write_list", errno.EFAULT, lambda api, f: api.write(f.targeted, [1, 2])),
    ("dp_read_negative_count", errno.EINVAL, lambda api, f: api.dp_read(f.targeted, -1)),
    ("read_negative_count", errno.EINVAL, lambda api, f: api.read(f.targeted, -5)),
    ("read_float_count", errno.EINVAL, lambda api, f: api.read(f.targeted, 1.5)),
    ("dp_write_not_dp_fd", errno.EINVAL, lambda api, f: api.dp_write(f.not_dp, b"x")),
    ("dp_target_not_dp_fd", errno.EINVAL, lambda api, f: api.dp_target(f.not_dp, 1, 2)),
    ("dp_read_not_dp_fd", errno.EINVAL, lambda api, f: api.dp_read(f.not_dp, 10)),
    ("dp_read_token_not_dp_fd", errno.EINVAL, lambda api, f: api.dp_read_token(f.not_dp)),
]


def _check_error(excinfo, expected):
    exc = excinfo.value
    if expected is BlockingIOError:
        assert isinstance(exc, BlockingIOError)
        assert exc.errno == errno.EAGAIN
    else:
        assert exc.errno == expected, f"errno {errno.errorcode.get(exc.errno)} != {errno.errorcode[expected]}"


@pytest.mark.parametrize("name,expected,call", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_error_cases_sync(name, expected, call):
    c = Cluster(nodes=2)
    a, _b, fds = _setup_fds(c)
    with pytest.raises(OSError) as ei:
        call(a.sync, fds)
    _check_error(ei, expected)


@pytest.mark.trio
@pytest.mark.parametrize("name,expected,call", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
async def test_error_cases_async(modeled, model_clock, name, expected, call):
    a, _b, fds = _setup_fds(modeled)
    with pytest.raises(OSError) as ei:
        await call(a, fds)
    _check_error(ei, expected)


def test_errors_leave_the_endpoint_usable():
    c = Cluster(nodes=2)
    a, b, fds = _setup_fds(c)
    for bad in (bytes(DP_MAX + 1), "str"):
        with pytest.raises(OSError):
            a.sync.dp_write(fds.targeted, bad)
    with pytest.raises(OSError):
        a.sync.dp_target(fds.targeted, 7, 7)
    assert a.sync.dp_write(fds.targeted, bytes(DP_MAX)) == DP_MAX       # the limit itself is fine
    assert b.sync.dp_read(fds.peer) == bytes(DP_MAX)                     # old target kept


def test_errno_survives_cluster_run():
    """An OSError raised by a DP call inside `Cluster.run` reaches the caller as such."""
    c = Cluster(nodes=2)
    a = c.process(0)
    with pytest.raises(OSError) as ei:
        c.run(a.dp_open, 70000)
    assert ei.value.errno == errno.EINVAL


def test_same_endpoint_number_on_two_nodes_is_fine_but_not_twice_on_one_node():
    c = Cluster(nodes=2)
    a, a2, b = c.process(0), c.process(0), c.process(1)
    a.sync.dp_open(100)
    b.sync.dp_open(100)
    with pytest.raises(OSError) as ei:
        a2.sync.dp_open(100)              # another process, same node
    assert ei.value.errno == errno.EADDRINUSE


# --------------------------------------------------------------------------- data


PAYLOADS = [b"", b"x", b"hello, directed point", bytes(range(256)) * 5 + bytes(220), bytes([0xA5]) * DP_MAX]


@pytest.mark.trio
async def test_round_trip_content_and_source_async(modeled, model_clock):
    a, b = modeled.process(0), modeled.process(1)
    fa = await a.dp_open(11)
    await a.dp_target(fa, 1, 22)
    fb = await b.dp_open(22)
    await b.dp_target(fb, 0, 11)
    for p in PAYLOADS:
        assert await a.dp_write(fa, p) == len(p)
        tok = await b.dp_read_token(fb)
        assert bytes(tok.data) == p
        assert tok.source == (0, 11)
        tok.release()
    # And back, with bytearray / memoryview accepted as data.
    await b.dp_write(fb, bytearray(b"reply-1"))
    await b.dp_write(fb, memoryview(b"reply-2"))
    assert await a.dp_read(fa, 100) == b"reply-1"
    assert await a.dp_read(fa, 100) == b"reply-2"


def test_round_trip_content_and_order_sync():
    c = Cluster(nodes=2)
    a, b = c.process(0), c.process(1)
    fa = a.sync.dp_open(11)
    a.sync.dp_target(fa, 1, 22)
    fb = b.sync.dp_open(22)
    for p in PAYLOADS:
        assert a.sync.dp_write(fa, p) == len(p)
    for p in PAYLOADS:
        assert b.sync.dp_read(fb, DP_MAX) == p
    ep = c.node(1).services["dp"].endpoints[22]
    assert ep.received == len(PAYLOADS)
    assert c.node(0).services["dp"].endpoints[11].sent == len(PAYLOADS)


def test_short_read_truncates_and_consumes_the_message():
    c = Cluster(nodes=2)
    a, b = c.process(0), c.process(1)
    fa = a.sync.dp_open(1)
    a.sync.dp_target(fa, 1, 2)
    fb = b.sync.dp_open(2)
    a.sync.dp_write(fa, b"hello")
    a.sync.dp_write(fa, b"world")
    assert b.sync.dp_read(fb, 3) == b"hel"
    assert b.sync.dp_read(fb, 0) == b""
    b.sync.set_blocking(fb, False)
    with pytest.raises(BlockingIOError):
        b.sync.dp_read(fb, 10)


def test_generic_read_write_entry_on_dp_fds():
    c = Cluster(nodes=2)
    a, b = c.process(0), c.process(1)
    fa = a.sync.dp_open(1)
    a.sync.dp_target(fa, 1, 2)
    fb = b.sync.dp_open(2)
    b.sync.dp_target(fb, 0, 1)
    assert a.sync.write(fa, b"via write()") == len(b"via write()")
    assert b.sync.read(fb, 100) == b"via write()"
    a.sync.write(fa, b"mixed 1")
    assert b.sync.dp_read(fb, 100) == b"mixed 1"
    b.sync.dp_write(fb, b"mixed 2")
    assert a.sync.read(fa, 100) == b"mixed 2"


@pytest.mark.trio
async def test_generic_read_write_entry_on_dp_fds_async(modeled, model_clock):
    a, b = modeled.process(0), modeled.process(1)
    fa = await a.dp_open(1)
    await a.dp_target(fa, 1, 2)
    fb = await b.dp_open(2)
    async with trio.open_nursery() as n:
        got = []

        async def reader():
            got.append(await b.read(fb, 64))   # blocks until the frame arrives

        n.start_soon(reader)
        await trio.sleep(0.001)
        assert got == []
        await a.write(fa, b"generic")
    assert got == [b"generic"]


# --------------------------------------------------------------------------- tokens


def _pair(c, ep_a=1, ep_b=2):
    a, b = c.process(0), c.process(1)
    fa = a.sync.dp_open(ep_a)
    a.sync.dp_target(fa, 1, ep_b)
    fb = b.sync.dp_open(ep_b)
    return a, b, fa, fb


def test_token_is_a_read_only_view_and_release_frees_the_slot():
    c = Cluster(nodes=2)
    a, b, fa, fb = _pair(c)
    tbp = c.node(1).services["dp"].endpoints[2].tbp
    slots = tbp.free_slots
    for m in (b"one", b"two", b"three"):
        a.sync.dp_write(fa, m)
    toks = [b.sync.dp_read_token(fb) for _ in range(3)]
    assert [bytes(t.data) for t in toks] == [b"one", b"two", b"three"]
    assert [len(t) for t in toks] == [3, 3, 5]
    assert all(t.source == (0, 1) for t in toks)
    assert all(t.data.readonly for t in toks)
    with pytest.raises(TypeError):
        toks[0].data[0] = 0
    assert tbp.free_slots == slots - 3
    kept = toks[0].data                   # a view the user holds on to
    # Release in any order.
    toks[1].release()
    assert tbp.free_slots == slots - 2
    toks[2].release()
    toks[0].release()
    assert tbp.free_slots == slots
    with pytest.raises(OSError) as e:
        toks[0].data                      # the view is gone with the slot
    assert e.value.errno == errno.EINVAL
    with pytest.raises(ValueError):
        bytes(kept)                       # and a view kept from before is released too


def test_double_release_is_einval():
    c = Cluster(nodes=2)
    a, b, fa, fb = _pair(c)
    a.sync.dp_write(fa, b"x")
    tok = b.sync.dp_read_token(fb)
    tok.release()
    with pytest.raises(OSError) as ei:
        tok.release()
    assert ei.value.errno == errno.EINVAL


def test_token_context_manager_releases():
    c = Cluster(nodes=2)
    a, b, fa, fb = _pair(c)
    tbp = c.node(1).services["dp"].endpoints[2].tbp
    slots = tbp.free_slots
    a.sync.dp_write(fa, b"ctx")
    with b.sync.dp_read_token(fb) as tok:
        assert bytes(tok.data) == b"ctx"
        assert tbp.free_slots == slots - 1
    assert tbp.free_slots == slots
    with pytest.raises(OSError) as ei:
        tok.release()
    assert ei.value.errno == errno.EINVAL


def test_held_tokens_keep_slots_out_of_circulation_and_full_pool_drops():
    c = Cluster(nodes=2, params=[("dp.tbp_slots", 4)])
    a, b, fa, fb = _pair(c)
    tbp = c.node(1).services["dp"].endpoints[2].tbp
    assert tbp.stats()["slots"] == 4
    for i in range(3):
        a.sync.dp_write(fa, bytes([i]))
    held = [b.sync.dp_read_token(fb) for _ in range(3)]
    for i in range(3, 6):
        assert a.sync.dp_write(fa, bytes([i])) == 1     # the sender is never told
    c.engine.run()
    assert tbp.stats()["dropped_full"] == 2             # one free slot for three messages
    assert b.sync.dp_read(fb) == bytes([3])
    for t in held:
        t.release()
    b.sync.set_blocking(fb, False)
    with pytest.raises(BlockingIOError):
        b.sync.dp_read(fb)


def test_full_tbp_drops_and_counts_and_the_sender_is_not_told():
    c = Cluster(nodes=2)
    a, b, fa, fb = _pair(c)
    ep = c.node(1).services["dp"].endpoints[2]
    nslots = ep.tbp.stats()["slots"]
    total = nslots + 16
    for i in range(total):
        assert a.sync.dp_write(fa, i.to_bytes(2, "big")) == 2
    c.engine.run()
    s = ep.tbp.stats()
    assert s["dropped_full"] == total - nslots
    assert s["deposited"] == nslots
    assert s["queued"] == nslots and s["high_water"] == nslots
    assert c.node(0).services["dp"].endpoints[1].sent == total
    got = []
    b.sync.set_blocking(fb, False)
    while True:
        try:
            got.append(b.sync.dp_read(fb, 10))
        except BlockingIOError:
            break
    assert got == [i.to_bytes(2, "big") for i in range(nslots)]   # the first ones, in order
    # Nothing reached the sender's node about the drops.
    assert c.node(0).services["dp"].stats()["rx_no_endpoint"] == 0
    assert c.node(0).netdevs["eth0"].stats()["rx_frames"] == 0


# --------------------------------------------------------------------------- readiness


@pytest.mark.trio
async def test_wait_readable_on_a_dp_fd(modeled, model_clock):
    a, b = modeled.process(0), modeled.process(1)
    fa = await a.dp_open(1)
    await a.dp_target(fa, 1, 2)
    fb = await b.dp_open(2)
    assert not _readable(fb)
    t_write = []

    async def writer():
        await trio.sleep(0.002)
        t_write.append(trio.current_time())
        await a.dp_write(fa, b"wake up")

    async with trio.open_nursery() as n:
        n.start_soon(writer)
        await trio.lowlevel.wait_readable(fb)
        assert trio.current_time() > t_write[0]          # after the frame crossed
        assert _readable(fb)
    b.set_blocking(fb, False)
    assert await b.dp_read(fb, 100) == b"wake up"
    assert not _readable(fb)


def test_fd_readability_follows_the_pool_when_reading_by_token():
    """With the last queued message taken as a token, nothing is left to read: the
    fd is not readable (a non-blocking read would fail with EAGAIN)."""
    c = Cluster(nodes=2)
    a, b, fa, fb = _pair(c)
    a.sync.dp_write(fa, b"only one")
    c.engine.run()
    assert _readable(fb)
    tok = b.sync.dp_read_token(fb)
    b.sync.set_blocking(fb, False)
    with pytest.raises(BlockingIOError):
        b.sync.dp_read(fb)
    assert not _readable(fb)
    tok.release()
    assert not _readable(fb)


def test_nonblocking_toggle():
    c = Cluster(nodes=2)
    a, b, fa, fb = _pair(c)
    b.sync.set_blocking(fb, False)
    with pytest.raises(BlockingIOError):
        b.sync.dp_read(fb)
    b.sync.set_blocking(fb, True)
    a.sync.dp_write(fa, b"now blocking")
    assert b.sync.dp_read(fb) == b"now blocking"
    with pytest.raises(OSError) as ei:
        b.set_blocking(123456, False)
    assert ei.value.errno == errno.EBADF


# --------------------------------------------------------------------------- close


def test_close_frees_the_endpoint_and_the_number_can_be_reused():
    c = Cluster(nodes=2)
    a, b, fa, fb = _pair(c)
    a.sync.dp_write(fa, b"first")           # the MDR keeps the endpoint it delivered to last:
    assert b.sync.dp_read(fb) == b"first"   # closed, it must be forgotten
    node = c.node(1)
    dp = node.services["dp"]
    shared_before = node.shared_in_use()
    refs = {m["name"]: m["use_count"] for m in node.modules.lsmod()}
    assert 2 in dp.endpoints
    assert b.sync.close(fb) == 0
    assert 2 not in dp.endpoints
    assert node.shared_in_use() < shared_before           # the TBP is unpinned
    assert {m["name"]: m["use_count"] for m in node.modules.lsmod()}["dp"] == refs["dp"] - 1
    with pytest.raises(OSError) as ei:
        b.sync.dp_read(fb)
    assert ei.value.errno == errno.EBADF
    # A message for the closed endpoint is dropped and counted at the receiver.
    a.sync.dp_write(fa, b"nobody home")
    c.engine.run()
    assert dp.rx_no_endpoint == 1
    # Same number again, from the same process and from another one.
    fb2 = b.sync.dp_open(2)
    a.sync.dp_write(fa, b"home again")
    assert b.sync.dp_read(fb2) == b"home again"
    b.sync.close(fb2)
    other = c.process(1)
    fb3 = other.sync.dp_open(2)
    a.sync.dp_write(fa, b"new owner")
    assert other.sync.dp_read(fb3) == b"new owner"


@pytest.mark.trio
async def test_close_wakes_a_blocked_reader_with_ebadf(modeled, model_clock):
    b = modeled.process(1)
    fb = await b.dp_open(2)
    fg = await b.dp_open(3)
    results = {}

    async def reader(key, fn, fd):
        try:
            results[key] = await fn(fd, 10)
        except OSError as exc:
            results[key] = exc.errno

    async with trio.open_nursery() as n:
        n.start_soon(reader, "dp_read", b.dp_read, fb)
        n.start_soon(reader, "read", b.read, fg)
        await trio.sleep(0.001)
        await b.close(fb)
        await b.close(fg)
    assert results == {"dp_read": errno.EBADF, "read": errno.EBADF}


def test_process_exit_closes_its_endpoints():
    c = Cluster(nodes=2)
    a = c.process(0)
    a.sync.dp_open(1)
    a.sync.dp_open(2)
    node = c.node(0)
    assert sorted(node.services["dp"].endpoints) == [1, 2]
    a._proc.exit()
    assert node.services["dp"].endpoints == {}
    assert {m["name"]: m["use_count"] for m in node.modules.lsmod()}["dp"] == 0
    node.modules.rmmod("dp")              # nothing holds it any more


def test_token_held_across_close_does_not_see_another_endpoints_data():
    """Closing an endpoint while a token is held: the token must not turn into a
    window on whatever reuses the pool's memory, and releasing it must not fail
    with a non-OSError."""
    c = Cluster(nodes=2)
    a, b, fa, fb = _pair(c)
    a.sync.dp_write(fa, b"first")
    tok = b.sync.dp_read_token(fb)
    b.sync.close(fb)
    other = c.process(1)
    fo = other.sync.dp_open(3)            # a new pool of the same size
    a.sync.dp_target(fa, 1, 3)
    a.sync.dp_write(fa, b"SECRET")
    c.engine.run()
    with pytest.raises(OSError) as e:
        tok.data                          # closing the endpoint revoked it
    assert e.value.errno == errno.EBADF
    with pytest.raises(OSError) as e:
        tok.release()
    assert e.value.errno == errno.EBADF
    assert other.sync.dp_read(fo) == b"SECRET"


# --------------------------------------------------------------------------- Endpoint objects


@pytest.mark.trio
async def test_endpoint_object_api(modeled, model_clock):
    a, b = modeled.process(0), modeled.process(1)
    ea = await a.endpoint(10, target=(1, 11))
    eb = await b.endpoint(11)
    await eb.target(0, 10)
    assert ea.ep == 10 and eb.ep == 11
    assert ea.fileno() == ea.fd and isinstance(ea.fd, int)
    assert ea.fd in dict(iter(a._proc.fds))
    assert await ea.send(b"one") == 3
    await ea.send(b"two")
    await ea.send(b"three")
    assert await eb.recv() == b"one"
    tok = await eb.recv_token()
    assert bytes(tok.data) == b"two" and tok.source == (0, 10)
    tok.release()
    async for msg in eb:
        assert msg == b"three"
        break
    await eb.send(b"back")
    assert await ea.recv(2) == b"ba"
    async with ea, eb:
        pass
    assert modeled.node(0).services["dp"].endpoints == {}
    assert modeled.node(1).services["dp"].endpoints == {}
    with pytest.raises(OSError) as ei:
        await ea.send(b"closed")
    assert ei.value.errno == errno.EBADF


@pytest.mark.trio
async def test_endpoint_without_target(modeled, model_clock):
    a = modeled.process(0)
    async with await a.endpoint(12) as e:
        with pytest.raises(OSError) as ei:
            await e.send(b"x")
        assert ei.value.errno == errno.EDESTADDRREQ
    with pytest.raises(OSError) as ei:
        await a.endpoint(12, target=(9, 9))   # opened, then the target fails
    assert ei.value.errno == errno.EHOSTUNREACH


def test_a_run_sizes_the_collectors_young_generation_for_the_cluster_and_restores_it():
    # A busy cluster keeps ~30 objects a node in flight; with Python's fixed first
    # threshold every young collection walked all of them (libdp._cluster.YOUNG_GC_PER_NODE).
    import gc

    from libdp._cluster import YOUNG_GC_PER_NODE
    before = gc.get_threshold()
    c = Cluster(nodes=40, nic="myrinet")
    assert gc.get_threshold() == before                  # building restores it too
    seen = []

    async def look():
        seen.append(gc.get_threshold())
    c.run(look)
    assert seen[0][0] == max(before[0], YOUNG_GC_PER_NODE * 40) and seen[0][1:] == before[1:]
    assert gc.get_threshold() == before


def test_a_file_made_readable_during_a_call_is_readable_when_the_call_returns():
    """A message that lands on one endpoint while the process's call on another drives
    the engine: once that call returns, ``select`` sees the first fd readable (the
    modeled eventfd is raised lazily, but before control leaves the kernel)."""
    c = Cluster(nodes=2)
    a, b = c.process(0), c.process(1)

    async def main():
        fx, fy = await b.dp_open(5), await b.dp_open(6)
        f1, f2 = await a.dp_open(5), await a.dp_open(6)
        await a.dp_target(f1, 1, 5)
        await a.dp_target(f2, 1, 6)
        await a.dp_write(f1, b"first")
        await a.dp_write(f2, b"second")
        assert not _readable(fx)                 # both frames still on their way
        assert await b.dp_read(fy, 100) == b"second"
        assert _readable(fx)                     # landed while the read of fy drove the engine
        assert not _readable(fy)
        assert await b.dp_read(fx, 100) == b"first"
        assert not _readable(fx)
    c.run(main)


def test_a_modeled_ping_pong_raises_no_eventfd_per_message():
    """Each ping is read by the kernel's read path before anything outside the kernel
    could look at the endpoint's fd: a ping-pong raises its eventfds a bounded number of
    times, not once per message."""
    from kernelsim._node import readiness_raises
    from libdp import pingpong
    counts = []
    for iters in (20, 220):
        c = Cluster(nodes=2)
        before = readiness_raises()
        c.run_spmd(pingpong, [1], iters, 0)
        counts.append(readiness_raises() - before)
    assert counts[1] - counts[0] < 10, counts
