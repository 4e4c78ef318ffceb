"""Every misuse of the public Python API is an OSError with the errno a UNIX programmer expects.

One table per surface: the DP calls (blocking and trio), tokens, cluster building and the
module loader. Each row is a call that must fail, and the errno it must fail with; the
test also checks that a failed call changed nothing a later good call depends on.
"""
from __future__ import annotations

import errno

import pytest

from libdp import Cluster

E = errno
BAD_INTS = [-1, True, "5", None, 5.0, 2**64, [], b"5"]


@pytest.fixture
def pair():
    c = Cluster(nodes=2)
    a, b = c.process(0).sync, c.process(1).sync
    fa = a.dp_open(5)
    a.dp_target(fa, 1, 5)
    fb = b.dp_open(5)
    return c, a, b, fa, fb


def _cases(fa, fb):
    """(call name, args, errno) for process a, which owns fa (fb belongs to process b)."""
    rows = [("dp_open", (v,), E.EINVAL) for v in BAD_INTS + [65536]]
    rows += [("dp_open", (5,), E.EADDRINUSE)]
    rows += [("dp_target", (fa, v, 5), E.EINVAL) for v in [True, False, "1", None, 1.0, -1, 65536, -2**70]]
    rows += [("dp_target", (fa, 99, 5), E.EHOSTUNREACH)]
    rows += [("dp_target", (fa, 1, v), E.EINVAL) for v in [True, False, -1, 65536, "x", None, 2.0]]
    rows += [("dp_target", (v, 1, 5), E.EBADF) for v in [-1, 999, None, "3", 2**70]]
    rows += [("dp_target", (fb, 1, 5), E.EBADF)]                       # b's endpoint: not in a's table
    rows += [("dp_write", (fa, v), E.EFAULT) for v in ["hello", None, 123, [1, 2], object()]]
    rows += [("dp_write", (fa, bytes(100000)), E.EMSGSIZE)]
    rows += [("dp_write", (v, b"x"), E.EBADF) for v in [-1, 999, None, "3", 2**70]]
    rows += [("dp_write", (fb, b"x"), E.EBADF)]
    rows += [("write", (fa, v), E.EFAULT) for v in ["hello", None, 123]]
    rows += [("write", (fa, bytes(100000)), E.EMSGSIZE)]
    rows += [("read", (fa, v), E.EINVAL) for v in [-1, "x", None, 1.5, True]]
    rows += [("dp_read", (fa, v), E.EINVAL) for v in [-1, "x", None, 1.5, True]]
    rows += [("dp_read", (v,), E.EBADF) for v in [-1, 999, None, "3"]]
    rows += [("dp_read", (fb,), E.EBADF)]
    rows += [("dp_read_token", (v,), E.EBADF) for v in [-1, 999, None, "3"]]
    rows += [("close", (v,), E.EBADF) for v in [-1, 999, None, "3", 3.5]]
    rows += [("close", (fb,), E.EBADF)]
    rows += [("set_blocking", (v, True), E.EBADF) for v in [-1, 999, None, "3"]]
    return rows


def test_every_dp_misuse_is_an_oserror_with_its_errno(pair):
    c, a, b, fa, fb = pair
    wrong = []
    for name, args, want in _cases(fa, fb):
        try:
            getattr(a, name)(*args)
            wrong.append(f"{name}{args!r:.60}: accepted")
        except OSError as exc:
            if exc.errno != want:
                wrong.append(f"{name}{args!r:.60}: {errno.errorcode.get(exc.errno)}, want {errno.errorcode[want]}")
        except Exception as exc:                                    # noqa: BLE001 - that is the finding
            wrong.append(f"{name}{args!r:.60}: {type(exc).__name__}: {exc}")
    assert not wrong, "\n".join(wrong)
    # Nothing a failed call did is visible to good calls: the endpoints still talk.
    a.dp_write(fa, b"still here")
    assert b.dp_read(fb) == b"still here"


def test_a_closed_fd_is_ebadf_and_its_endpoint_number_is_free(pair):
    c, a, b, fa, fb = pair
    a.close(fa)
    for name, args in [("close", (fa,)), ("dp_write", (fa, b"x")), ("dp_read", (fa,)), ("dp_target", (fa, 1, 5))]:
        with pytest.raises(OSError) as ei:
            getattr(a, name)(*args)
        assert ei.value.errno == E.EBADF, name
    assert a.dp_open(5) >= 0


def test_tokens_are_read_only_and_released_once(pair):
    c, a, b, fa, fb = pair
    a.dp_write(fa, b"abc")
    tok = b.dp_read_token(fb)
    with pytest.raises(TypeError):
        tok.data[0] = 1                     # a read-only view of the pool: the user cannot write it
    tok.release()
    with pytest.raises(OSError) as ei:
        tok.release()
    assert ei.value.errno == E.EINVAL
    a.dp_write(fa, b"abc")
    tok = b.dp_read_token(fb)
    b.close(fb)
    with pytest.raises(OSError) as ei:
        tok.release()
    assert ei.value.errno == E.EBADF       # the endpoint's close revoked it


def test_the_async_endpoint_refuses_the_same_way(pair):
    c = pair[0]

    async def main():
        e = await c.process(0).endpoint(11)
        for bad in ["x", None, 5]:
            with pytest.raises(OSError) as ei:
                await e.send(bad)
            assert ei.value.errno == E.EFAULT
        with pytest.raises(OSError) as ei:
            await e.recv(-1)
        assert ei.value.errno == E.EINVAL
        await e.aclose()
        with pytest.raises(OSError) as ei:
            await e.aclose()
        assert ei.value.errno == E.EBADF

    c.run(main)


@pytest.mark.parametrize("kwargs", [
    {"nodes": 0}, {"nodes": -1}, {"nodes": True}, {"nodes": "2"}, {"nodes": 2.0}, {"nodes": None},
    {"nodes": 10**9}, {"nodes": 65537},
    {"platform": "nope"}, {"nic": "nope"},
    {"params": ["x"]}, {"params": [("cpu.hz", "fast")]}, {"params": [("cpu.hz", -1)]},
    {"params": [("nope.key", 1)]}, {"params": [5]},
    {"load": ["nosuch"]}, {"load": ["dp:nope=1"]}, {"load": ["dp:tbp_slots=-3"]}, {"load": [5]},
    {"load": ["dp:tbp_slots"]}, {"seed": "x"}, {"seed": 1.5},
])
def test_cluster_building_refuses_bad_arguments(kwargs):
    with pytest.raises(OSError) as ei:
        Cluster(**kwargs)
    assert ei.value.errno in (E.EINVAL, E.ENOENT, E.ENODEV), ei.value


@pytest.mark.parametrize("nid", [-1, 2, True, "0", None, 0.0])
def test_process_and_node_need_a_node_of_the_cluster(nid):
    c = Cluster(nodes=2)
    for fn in (c.process, c.node):
        with pytest.raises(OSError) as ei:
            fn(nid)
        assert ei.value.errno == E.EINVAL


@pytest.mark.parametrize("call, args, kwargs, want", [
    ("insmod", ("nosuch",), {}, E.ENOENT),
    ("insmod", ("dp",), {}, E.EEXIST),
    ("insmod", ("atm",), {"nope": 1}, E.EINVAL),
    ("rmmod", ("nosuch",), {}, E.ENOENT),
    ("modprobe", ("nosuch",), {}, E.ENOENT),
    ("modinfo", ("nosuch",), {}, E.ENOENT),
    ("rmmod", ("dec21140",), {}, E.EBUSY),              # DP uses it
])
def test_module_loader_errors(call, args, kwargs, want):
    c = Cluster(nodes=2)
    before = [m["name"] for m in c.node(0).modules.lsmod()]
    with pytest.raises(OSError) as ei:
        getattr(c.node(0).modules, call)(*args, **kwargs)
    assert ei.value.errno == want
    assert [m["name"] for m in c.node(0).modules.lsmod()] == before


def test_rmmod_dp_is_ebusy_while_an_endpoint_is_open(pair):
    c, a, b, fa, fb = pair
    with pytest.raises(OSError) as ei:
        c.node(0).modules.rmmod("dp")
    assert ei.value.errno == E.EBUSY
    a.close(fa)
    c.node(0).modules.rmmod("dp")


# --------------------------------------------------------------------------- isolation


def _reachable(root, depth=6):
    """Every object reachable from `root` through public attributes (what a user script
    can touch without reaching for names the library marks private)."""
    import types
    seen, frontier, out = {id(root)}, [root], [root]
    for _ in range(depth):
        nxt = []
        for obj in frontier:
            for name in dir(obj):
                if name.startswith("_"):
                    continue
                try:
                    val = getattr(obj, name)
                except Exception:                       # noqa: BLE001 - a property that refuses is fine
                    continue
                if isinstance(val, (types.MethodType, types.BuiltinMethodType, types.FunctionType, type,
                                    types.ModuleType, int, float, str, bytes, bool, type(None))):
                    continue
                if id(val) not in seen:
                    seen.add(id(val))
                    out.append(val)
                    nxt.append(val)
        frontier = nxt
    return out


def test_a_process_handle_reaches_no_kernel_object_and_no_writable_memory(pair):
    """The attack of issue 11: from its own handle, a process walks every public attribute
    (its DP, the sync calls, its node, an endpoint object, a token) looking for the node's
    memory, another process's files or pool, or any writable view of kernel memory."""
    from kernelsim import Node
    from kernelsim._physmem import PhysMem
    c, a, b, fa, fb = pair
    a.dp_write(fa, b"victim's message")
    tok = b.dp_read_token(fb)
    attacker = c.process(1)
    roots = [attacker, attacker.sync, attacker.node, tok]
    found = [o for r in roots for o in _reachable(r)]
    kernel = [o for o in found if isinstance(o, (Node, PhysMem))]
    writable = [o for o in found if isinstance(o, (bytearray, memoryview)) and not
                (isinstance(o, memoryview) and o.readonly)]
    assert kernel == [] and writable == []
    assert bytes(tok.data) == b"victim's message"


def test_another_process_cannot_use_a_process_s_fd_or_token(pair):
    c, a, b, fa, fb = pair
    a.dp_write(fa, b"for b only")
    other = c.process(1).sync                         # a second process on b's node
    with pytest.raises(OSError) as ei:
        other.dp_read(fb)                             # b's fd number means nothing in its table
    assert ei.value.errno == E.EBADF
    assert b.dp_read(fb) == b"for b only"             # and b lost nothing


def test_node_view_offers_id_profile_and_statistics_only(pair):
    c, a, b, fa, fb = pair
    view = c.process(1).node
    assert view.nid == 1 and view.modeled and "dp" in view.stats()
    for name in ("mem", "netdevs", "services", "processes", "engine"):
        with pytest.raises(AttributeError) as ei:
            getattr(view, name)
        assert "view of its node" in str(ei.value)


def test_the_object_under_a_token_is_read_only_and_gone_with_the_slot(pair):
    c, a, b, fa, fb = pair
    a.dp_write(fa, b"abc")
    tok = b.dp_read_token(fb)
    under = tok.data.obj                  # what a memoryview is a view of
    with pytest.raises(TypeError):
        memoryview(under)[0] = 1          # read-only too: not the pool's writable bytes
    assert bytes(memoryview(under)) == b"abc"
    tok.release()
    with pytest.raises(OSError) as ei:
        memoryview(under)                 # the slot went back to the pool: no new view of it
    assert ei.value.errno == E.EBADF
