"""Every node sends numbered Active Messages to every other node; each checks it got them all.

Run it once per node of a running cluster with am loaded (see docs/real-nodes.md):

    dp cluster up --nodes 4 --nic tb2
    dp insmod am --node all
    dp run -n 4 docs/examples/all_to_all.py [ROUNDS]
    dp rmmod am --node all
    dp cluster down

Which node this copy is: DP_NODE (set by ``dp run``), or the rank mpirun/srun gives it.
AM is reliable (SP AM: sequence numbers, acknowledgements, go-back-N), so every request
arrives exactly once even if peers start at different times.
"""
import sys
import time

import libdp
from libdp.am import AM

H_MSG, H_DONE = 1, 2


def main(rounds: int = 20) -> int:
    dp = libdp.attach()                       # this process's node
    me, nodes = dp.nid, dp.nids
    peers = [n for n in nodes if n != me]
    got = {p: [] for p in peers}             # what each peer sent us, in arrival order
    done = set()

    def on_msg(token, k):
        got[token.src].append(k)

    def on_done(token, _):
        done.add(token.src)

    am = AM.open_sync(dp, {H_MSG: on_msg, H_DONE: on_done}).sync
    t = time.perf_counter()
    for k in range(rounds):
        for p in peers:
            am.am_request_1(p, H_MSG, k)
    am.poll_until(lambda: all(len(v) == rounds for v in got.values()))
    for p in peers:                           # tell everyone we have all of ours ...
        am.am_request_1(p, H_DONE, 0)
    am.poll_until(lambda: len(done) == len(peers))   # ... and stay until they have theirs
    end = time.perf_counter() + 0.2           # answer late acknowledgements a moment longer
    while time.perf_counter() < end:
        am.am_poll()
    am.close()
    ok = all(v == list(range(rounds)) for v in got.values())
    print(f"node {me}: {sum(map(len, got.values()))} messages from {len(peers)} peers, "
          f"{'all in order' if ok else 'WRONG'}, {time.perf_counter() - t:.2f} s", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
