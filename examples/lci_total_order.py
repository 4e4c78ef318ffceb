"""Totally ordered broadcast on LCI, as Panda builds it (FACTS LCI-C23).

A sender fetches a global sequence number from a central sequencer with LCI's
fetch-and-add (the sequencer's NI answers: its host does nothing), then broadcasts
the message with that number in front; every receiver holds messages back until all
lower numbers have been delivered, so every node delivers every message in the same
order -- whatever order the broadcasts overtake each other in.

    python examples/lci_total_order.py [--nodes 8] [--messages 3] [--variant I-sdma] [--tree binary]

Node 0 is the sequencer and broadcasts nothing (LCI sends to other nodes only, so it
could not fetch from its own NI); every other node broadcasts ``--messages`` messages.
Prints each node's delivery order, which must be the same everywhere.
"""
from __future__ import annotations

import argparse
import struct

from libdp import Cluster
from libdp.lci import LCI

SEQ = struct.Struct(">I")
SEQUENCER = 0


class TotalOrder:
    """The receiving side: an upcall that reorders by sequence number."""

    def __init__(self):
        self.held = {}
        self.next = 0
        self.delivered = []             # (seq, source, payload) in delivery order

    def __call__(self, pkt):
        data = pkt.data
        self.accept(SEQ.unpack_from(data)[0], pkt.src, data[SEQ.size:])
        return False

    def accept(self, seq, src, payload):
        self.held[seq] = (src, payload)
        while self.next in self.held:
            s, p = self.held.pop(self.next)
            self.delivered.append((self.next, s, p))
            self.next += 1


async def total_order_program(dp, rank, size, messages=3):
    lci = await LCI.open(dp)
    order = TotalOrder()
    lci.set_upcall(order)
    total = (size - 1) * messages
    try:
        if rank != SEQUENCER:
            for i in range(messages):
                payload = f"node {rank} message {i}".encode()
                seq = await lci.fetch_add(SEQUENCER, 1)          # the global sequence number
                await lci.bcast(SEQ.pack(seq) + payload)
                order.accept(seq, rank, payload)                 # a sender delivers its own in order too
        await lci.poll_until(lambda: len(order.delivered) >= total)
    finally:
        await lci.close()
    return order.delivered


def run(nodes=8, messages=3, variant="I-sdma", tree="binary", platform="p3_1000_lanai9", params=(), seed=0):
    cluster = Cluster(nodes=nodes, nic="myrinet", platform=platform, params=params, seed=seed,
                      load=[("lci", {"variant": variant, "tree": tree})])
    return cluster.run_spmd(total_order_program, messages)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--messages", type=int, default=3)
    ap.add_argument("--variant", default="I-sdma")
    ap.add_argument("--tree", default="binary")
    args = ap.parse_args()
    orders = run(args.nodes, args.messages, args.variant, args.tree)
    same = all(o == orders[0] for o in orders)
    for seq, src, payload in orders[0]:
        print(f"{seq:4d}  from node {src}: {payload.decode()}")
    print(f"# {len(orders)} nodes delivered {len(orders[0])} messages, "
          f"{'all in the same order' if same else 'NOT in the same order'}")


if __name__ == "__main__":
    main()
