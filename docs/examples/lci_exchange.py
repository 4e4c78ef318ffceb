"""Every node sends numbered LCI packets to every other node; each checks it got them all.

Run it once per node of a running Myrinet cluster with lci loaded (see docs/real-nodes.md):

    dp cluster up --nodes 2 --nic myrinet
    dp insmod lci variant=I-nirx --node all
    dp run -n 2 docs/examples/lci_exchange.py [ROUNDS]
    dp rmmod lci --node all
    dp cluster down

The script drives the NI itself (LCI-A54): ``LCI.open_sync`` asks its node for the
board's frames and runs LCI's host library and NI control program in this process.
I-nirx and I-hrx resend what a peer's NI did not take, so the scripts may start at
different times; a variant without retransmission (I-sdma) needs every peer open
before the first send.
"""
import sys
import time

import libdp
from libdp.lci import LCI


def main(rounds: int = 20) -> int:
    dp = libdp.attach()                       # this process's node (DP_NODE, set by dp run)
    me, nodes = dp.nid, dp.nids
    peers = [n for n in nodes if n != me]
    got = {p: [] for p in peers}             # what each peer sent us, in arrival order
    done = set()

    def upcall(pkt):
        word = bytes(pkt.data)
        if word == b"done":
            done.add(pkt.src)
        else:
            got[pkt.src].append(int(word))
        return False                          # not kept: the buffer goes back to the NI

    lci = LCI.open_sync(dp, upcall).sync
    t = time.perf_counter()
    for k in range(rounds):
        for p in peers:
            lci.send(p, b"%d" % k)
    lci.poll_until(lambda: all(len(v) == rounds for v in got.values()))
    for p in peers:                           # tell everyone we have all of ours ...
        lci.send(p, b"done")
    lci.poll_until(lambda: len(done) == len(peers))   # ... and stay until they have theirs
    lci.flush()                               # every packet of ours acknowledged
    end = time.perf_counter() + 0.2           # answer late retransmissions a moment longer
    while time.perf_counter() < end:
        lci.poll()
    lci.close()
    ok = all(v == list(range(rounds)) for v in got.values())
    print(f"node {me}: {sum(map(len, got.values()))} packets from {len(peers)} peers, "
          f"{'all in order' if ok else 'WRONG'}, {time.perf_counter() - t:.2f} s", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
