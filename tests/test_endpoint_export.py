"""DP's endpoint export (dpcore/_export.pyx), in one process: what a real node's deposit
posts to the owner's delivery ring, and the release operations it accepts back -- only
slots it delivered, each once; anything else is EINVAL and counted."""
import errno
import os

import pytest

from kernelsim.daemon._server import NodeServer, Session
from kernelsim.media.mesh import remove_cluster_rings
from libdp._clusterfile import ClusterFile, NodeSpec
from libdp._realnode import build_node


@pytest.fixture
def node_with_export():
    name = f"exp{os.getpid()}"
    cluster = ClusterFile(name, "dec21140", "shm", [NodeSpec(0), NodeSpec(1)], run_dir=f"/tmp/{name}")
    node, transport = build_node(cluster, 1)
    server = NodeServer(node, f"/nonexistent/{name}.sock")
    session = Session(server, None, os.getpid(), os.getuid())
    proc = session.proc = node.spawn("owner")

    def call(name, *args):
        path = node.callgate_path if name == "dp_write" else node.syscall_path
        value, exc = server._run(path(proc, name, args))
        if exc is not None:
            raise exc
        return value

    fd = call("dp_open", 5)
    export = proc.fds.get(fd).export_to(session)
    sender = call("dp_open", 6)
    call("dp_target", sender, 1, 5)                  # this node's own endpoint: a local delivery
    try:
        yield call, sender, export
    finally:
        export.close()
        transport.close()
        remove_cluster_rings(name)


def _release(*slots, op=1):
    return bytes([op]) + b"".join(s.to_bytes(4, "little") for s in slots)


def test_a_deposit_posts_its_record_and_only_delivered_slots_come_back(node_with_export):
    call, sender, export = node_with_export
    call("dp_write", sender, b"hello")
    slot, n, nid, ep = export.ring.pop()
    assert (n, nid, ep) == (5, 1, 6)
    assert export.stats() == {"delivered": 1, "held_by_owner": 1, "bad_releases": 0}
    assert export.held == {slot}
    export.ring_op(_release(slot))
    assert export.stats()["held_by_owner"] == 0
    for bad in (_release(slot),                      # given back twice
                _release(1 << 20),                   # never a slot of this pool
                _release(slot, op=2),                # not a release
                _release(slot)[:-1],                 # a slot number cut short
                b""):
        with pytest.raises(OSError) as e:
            export.ring_op(bad)
        assert e.value.errno == errno.EINVAL
    assert export.stats()["bad_releases"] == 2       # the two that named a slot it does not hold


def test_a_burst_is_delivered_in_order_and_released_in_any_order(node_with_export):
    call, sender, export = node_with_export
    for i in range(3):
        call("dp_write", sender, bytes([i]) * (i + 1))
    recs = [export.ring.pop() for _ in range(3)]
    assert [r[1] for r in recs] == [1, 2, 3]
    assert export.ring.pop() is None
    export.ring_op(_release(recs[2][0], recs[0][0], recs[1][0]))
    assert export.stats() == {"delivered": 3, "held_by_owner": 0, "bad_releases": 0}
