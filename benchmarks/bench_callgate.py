"""Call-gate dp_write against the generic write() entry, per call, in wall time.

Both calls run the same DP transmit path on the same node in real time (the paths'
modeled costs are not charged; the host does the work), so the difference is the
entry: the call gate goes straight to DP's routine, the generic entry goes through the
system-call table and the VFS. The modeled costs of both entries are printed beside.

    python benchmarks/bench_callgate.py [--calls 50000]
"""
import argparse
import time

from kernelsim.media.backend import DevicePort
from kernelsim.media.real import ShmLink
from libdp import DP, Cluster
from nic_drivers.dec21140 import hwaddr_for


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=50000)
    args = ap.parse_args()
    with ShmLink.create(slots=4096) as link:
        hosts = {r: {"ether": hwaddr_for(r)} for r in range(2)}
        node = Cluster.real_node(0, hosts, DevicePort(link.end(0)))
        peer = link.end(1)
        dp = DP(node.spawn()).sync
        fd = dp.dp_open(1)
        dp.dp_target(fd, 1, 1)
        buf = bytearray(4096)
        results = {}
        for name, call in (("dp_write (call gate)", dp.dp_write), ("write (generic entry)", dp.write)):
            best = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(args.calls // 5):
                    call(fd, b"x")
                    while peer.recv_into(buf) >= 0:
                        pass
                best = min(best, (time.perf_counter() - t) / (args.calls // 5))
            results[name] = best
        gate, generic = results["dp_write (call gate)"], results["write (generic entry)"]
        c = node.costs
        print(f"{'call':<24}{'wall us/call':>14}{'modeled entry us':>18}")
        print(f"{'dp_write (call gate)':<24}{gate * 1e6:>14.2f}{c.callgate * 1e6:>18.2f}")
        print(f"{'write (generic entry)':<24}{generic * 1e6:>14.2f}{(c.syscall + c.vfs) * 1e6:>18.2f}")
        print(f"generic / call gate: wall {generic / gate:.2f}x, modeled entry {(c.syscall + c.vfs) / c.callgate:.1f}x")


if __name__ == "__main__":
    main()
