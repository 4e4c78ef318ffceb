"""One real node's pass, hot, in one process: the CPU a node spends per message.

    python benchmarks/bench_node_pass.py [--count 20000] [--size 1]

Two real nodes (the kernel, 21140 model and driver, DP of ``dp cluster up``) built in
this process over their shared-memory mesh, each behind a `NodeServer` that is never
served: node 0 takes call-gate entries (``dp_write``) as its loop does
(`NodeServer._drain_gate`: gate ring -> call gate -> DP -> driver -> device -> mesh), node
1 takes the frames as its loop does (``poll_devices``: mesh -> device -> interrupt path ->
DP -> Token Buffer Pool -> the owner's delivery ring, published once per pass), and the
"script" takes the records and gives the slots back through its gate ring. No process
switches, no wake-ups: what a node pass costs when the caches are warm -- the floor under
docs/real-nodes.md's "Where a round trip's time goes". Prints µs of CPU (thread time)
per message for each half, in batches of --batch (1: one message per pass, as in a
round trip).

The load-independent figure is callgrind's instructions per message, the difference of
two counts (run them in parallel):

    for n in 2000 12000; do valgrind --tool=callgrind --callgrind-out-file=cg.$n \\
        python benchmarks/bench_node_pass.py --count $n --batch 1 --quiet; done
    # (total of cg.12000 - total of cg.2000) / 10000: one send pass + one receive pass
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kernelsim.daemon import GATE_CALL, EventRing, batch_posts, publish_posts  # noqa: E402
from kernelsim.daemon._server import Gate, NodeServer, Session, _PlainExport  # noqa: E402
from kernelsim.media._shmring import ShmRing  # noqa: E402
from kernelsim.media.mesh import remove_cluster_rings  # noqa: E402
from libdp._clusterfile import ClusterFile, NodeSpec  # noqa: E402
from libdp._realnode import build_node  # noqa: E402


class _Side:
    """One node with a server, a kernel process and one endpoint whose gate is set up."""

    def __init__(self, cluster, nid, ep, target=None):
        self.node, self.transport = build_node(cluster, nid)
        self.server = NodeServer(self.node, f"/nonexistent/node{nid}.sock")
        self.session = Session(self.server, None, os.getpid(), os.getuid())
        self.proc = self.session.proc = self.node.spawn(f"bench{nid}")
        self.fd = self.call("dp_open", ep)
        if target is not None:
            self.call("dp_target", self.fd, *target)
        f = self.proc.fds.get(self.fd)
        export = f.export_to(self.session) if target is None else _PlainExport(f)
        self.gate = Gate(self.session, self.fd, f, export)
        self.session.gates[self.fd] = self.gate
        self.server._gates.append(self.gate)
        self.user_ring = ShmRing.over_fd(self.gate.memfd, self.gate.bell, False)   # the script's end

    def call(self, name, *args):
        value, exc = self.server._run(self.node.syscall_path(self.proc, name, args))
        if exc is not None:
            raise exc
        return value

    def close(self):
        self.user_ring.close()
        self.gate.export.close()
        self.gate.close()
        self.transport.close()


def run(count: int, size: int, batch: int, quiet: bool = False, load=()) -> dict:
    """`load`: modules (and parameters) of both nodes (`ClusterFile` ``load``). Besides the
    CPU per message, the receiving card's interrupts and frames missed."""
    name = f"np{os.getpid()}"
    cluster = ClusterFile(name, "dec21140", "shm", [NodeSpec(0), NodeSpec(1)], run_dir=f"/tmp/{name}", load=load)
    rx = tx = None
    try:
        rx = _Side(cluster, 1, 5)
        tx = _Side(cluster, 0, 5, target=(1, 5))
        export = rx.gate.export
        deliveries = EventRing(export._memfd, export._efd)           # the receiving script's view
        entry = bytes([GATE_CALL, len(b"dp_write")]) + b"dp_write"
        payload = b"x" * size
        release_head = bytes([2, 1])                                  # GATE_FILEOP, OP_RELEASE
        send_s = recv_s = 0.0
        clock = time.thread_time
        drain_gate, poll_devices = tx.server._drain_gate, rx.node.poll_devices
        poll_gates = rx.server._poll_gates
        batch_posts(True)
        got = 0
        for i in range(0, count, batch):
            n = min(batch, count - i)
            for _ in range(n):
                tx.user_ring.send2(entry, payload)
            t0 = clock()
            drain_gate(tx.gate, n)                # node 0's pass over its gate
            t1 = clock()
            poll_devices()                        # node 1's pass over its transport
            publish_posts()
            t2 = clock()
            slots = []
            while True:
                rec = deliveries.pop()
                if rec is None:
                    break
                slots.append(rec[0])
            got += len(slots)
            if slots:                             # the script gives the slots back (its next pass takes them)
                rx.user_ring.send(release_head + b"".join(s.to_bytes(4, "little") for s in slots), False)
            t3 = clock()
            poll_gates()
            t4 = clock()
            send_s += t1 - t0
            recv_s += (t2 - t1) + (t4 - t3)
        batch_posts(False)
        deliveries.close()
        out = {"messages": count, "delivered": got, "send_us": send_s / count * 1e6, "recv_us": recv_s / count * 1e6}
        card = next(iter(rx.node.netdevs.values())).stats()
        out["rx_interrupts"] = rx.node.irq.stats()[f"irq{card['irq']}"]["interrupts"]
        out["rx_missed"] = card["device"]["rx_missed"]
        if not quiet:
            print(f"# node pass, hot, one process: {count} messages of {size} bytes, {batch} per pass")
            print(f"  send pass (gate entry -> mesh)        {out['send_us']:7.2f} us CPU per message")
            print(f"  receive pass (mesh -> delivery ring)  {out['recv_us']:7.2f} us CPU per message "
                  f"(slot releases included)")
            print(f"  delivered {got}/{count}")
        return out
    finally:
        for side in (tx, rx):
            if side is not None:
                side.close()
        remove_cluster_rings(name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--size", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1, help="messages per pass (default 1, as in a round trip)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    run(args.count, args.size, args.batch, args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
