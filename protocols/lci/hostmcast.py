"""Multicast and fetch-and-add in LCI's host library (LCI-C10, C11, C12, C20).

The host's share of multicast depends on where packets are forwarded:

* **NI forwarding** (I-sdma, I-pio, I-nirx: LCI-C10). A broadcast from this host is one
  send descriptor (``SD_MCAST``, root = this node): the data goes to the NI the
  variant's way, once, and the NI sends it to each of the root's children. Multicast
  packets arrive like unicast ones; the upcall sees the root as ``pkt.src``.
* **Host forwarding, I-sdma-hmc** (LCI-C20). The NIs do not forward: a multicast packet
  goes up to the host, which -- when it polls, or after the watchdog's interrupt --
  forwards it with one ``SD_MCAST`` descriptor: one host-to-NI transfer per hop, the
  same NI buffer to each child. Packets are forwarded one by one, so a long message
  pipelines down the tree. Reliability is the NIs' (credits).
* **I-hrx** (LCI-C12). The host runs the go-back-N protocol, so it forwards under it:
  one reliable send per child, each packet kept in its NI send buffer until that child
  acknowledges it. What cannot be sent at once (no buffer, a closed window) waits in a
  queue that grows on demand, in arrival order, and goes out at the next poll or send.
  Fetch-and-add requests are answered here too, from the library's variable.

A fetch-and-add (LCI-C11) is a packet of kind FA_REQ to the node holding the variable;
its NI (the host with I-hrx) answers with the value before the increment. The reply
is consumed by the library, not given to the upcall.
"""
from __future__ import annotations

import errno
from collections import deque

from kernelsim import WouldBlock

from protocols.lci import _wire as W
from protocols.lci.firmware import layout as L
from protocols.lci.trees import Group, parse_groups

__all__ = ["HostMulticast", "install_group", "my_group", "Bcast", "FetchAddOp"]

MASK32 = 0xFFFFFFFF


def my_group(nid: int, spec: str, nodes, tree):
    """This node's multicast group (a `Group`), or None if it is in none."""
    for ms in parse_groups(spec, nodes):
        if nid in ms:
            return Group(ms, tree)
    return None


def install_group(svc, group) -> None:
    """insmod: the host writes the forwarding table into its NI (LCI-C10)."""
    svc.group = group
    svc.fw.multicast.set_table(group)
    svc.lib.mc.group = group


class Bcast:
    """A multicast of one packet from this host, in progress."""

    __slots__ = ("data", "kids", "n")

    def __init__(self, data, kids, n):
        self.data = data
        self.kids = deque(kids)
        self.n = n


class FetchAddOp:
    """A fetch-and-add in progress: request sent, then the reply."""

    __slots__ = ("dest", "inc", "sent", "value")

    def __init__(self, dest, inc):
        self.dest = dest
        self.inc = inc
        self.sent = False
        self.value = None


class HostMulticast:
    def __init__(self, lib):
        self.lib = lib
        self.group = None
        self.queue = deque()            # I-hmc: (root, data); I-hrx: (dest, data, wire, aux)
        self.fa_value = 0               # I-hrx: this node's fetch-and-add variable
        self.fa_op = None
        self.servicing = False
        self.st = {"mcast_sent": 0, "mcast_received": 0, "forwarded": 0, "forward_queue_max": 0,
                   "fa_sent": 0, "fa_answered": 0}

    @property
    def host_forwards(self) -> bool:
        return self.lib.variant.multicast == "host"

    def check_group(self):
        g = self.group
        if g is None:
            raise OSError(errno.EINVAL, f"node {self.lib.node.nid} is in no multicast group (lci groups=)")
        if len(g) < 2:
            raise OSError(errno.EINVAL, "a multicast group of one node has no one to send to")
        return g

    # -- sending a multicast ----------------------------------------------------------------------

    def bcast_start(self, data) -> Bcast:
        g = self.check_group()
        me = self.lib.node.nid
        n = len(data) if not isinstance(data, tuple) else data[2]
        return Bcast(data, g.children(me, me), n)

    def bcast_path(self, op: Bcast, since=None):
        """Send one packet to the group, down this node's tree."""
        lib = self.lib
        me = lib.node.nid
        if lib.reliability != "host":
            yield from self.mcast_path(me, lib._bytes(op.data), since)
            op.kids.clear()
        else:
            while op.kids:
                yield from lib.send_path(op.kids[0], op.data, since, wire=W.K_MCAST, aux=me)
                op.kids.popleft()
                since = None
            self.st["mcast_sent"] += 1
        yield from self.service_path()
        return op.n

    def mcast_path(self, root: int, data: bytes, since=None):
        """One SD_MCAST descriptor: the NI sends the buffer to root's children (WouldBlock
        while no NI send buffer is free)."""
        lib = self.lib
        c = lib.c
        lib.check_abort()
        yield (0.5 * c.h_send if since is not None else c.h_send) + lib._take_owed()
        ok = yield from lib._need()
        if not ok:
            lib.st["send_waits"] += 1
            lib._stall_check()
            raise WouldBlock(lib.events, "LCI: no free NI send buffer")
        lib.stalled_since = None
        buf = lib.send_free.popleft()
        n = len(data)
        flags = addr = 0
        if lib.transfer == "sdma":
            q = lib.sendq + buf * lib.mtu
            yield c.copy(n, lib.fw.nsend * _lines(n) + lib._source_bytes(data))
            lib.mem.write(q, data)
            addr = q
        else:                           # PIO; RCPY's multicast data is written by PIO as on a miss
            yield lib.dev.pio_time(n)
            lib.dev.pio_write(lib.fw.tx[buf].buf + lib.fw.unicast.payload_off, data)
            flags = L.SDF_PIO
        yield lib.pio_desc
        lib._post(L.SD_MCAST, flags, n, 0, buf, addr, root)
        lib.st["sent"] += 1
        lib.st["sent_bytes"] += n
        if root == lib.node.nid:
            self.st["mcast_sent"] += 1
        else:
            self.st["forwarded"] += 1
        return n

    # -- receiving (a hook of the library's poll) ---------------------------------------------

    def on_mcast(self, hdr, off: int) -> int:
        """A multicast packet (no modeled time of its own: a plain call, not a path, as
        every packet of a broadcast comes through here): the root, which the upcall sees
        as the source; queued for the children if this host forwards (C12, C20)."""
        lib = self.lib
        self.st["mcast_received"] += 1
        root = hdr.aux
        if self.host_forwards and self.group is not None:
            me = lib.node.nid
            kids = self.group.children(me, root)
            if kids:
                data = lib.mem.read(off, hdr.length)
                if lib.reliability == "host":
                    for k in kids:
                        self.queue.append((k, data, W.K_MCAST, root))
                else:
                    self.queue.append((root, data))
                if len(self.queue) > self.st["forward_queue_max"]:
                    self.st["forward_queue_max"] = len(self.queue)
        return root

    def on_packet(self, hdr, off: int):
        """A packet of a kind beyond DATA: the source the upcall sees, or -1 if consumed."""
        lib = self.lib
        kind = hdr.kind
        if kind == W.K_MCAST:
            return self.on_mcast(hdr, off)
        if kind == W.K_FA_REPLY:
            op = self.fa_op
            if op is not None and op.sent and op.value is None and hdr.src == op.dest:
                op.value = hdr.aux
            else:
                lib.malformed["unknown_kind"] += 1
            return -1
        if kind == W.K_FA_REQ and lib.reliability == "host":
            yield lib.c.h_ack                           # read, add, write the variable
            old = self.fa_value
            self.fa_value = (old + hdr.aux) & MASK32
            self.st["fa_answered"] += 1
            self.queue.append((hdr.src, b"", W.K_FA_REPLY, old))
            return -1
        lib.malformed["unknown_kind"] += 1
        return -1

    def service_path(self):
        """Send what the queue holds, in order, as far as buffers and windows allow."""
        if self.servicing or not self.queue:
            return
        lib = self.lib
        self.servicing = True
        try:
            while self.queue:
                item = self.queue[0]
                try:
                    if len(item) == 2:
                        yield from self.mcast_path(item[0], item[1])
                    else:
                        dest, data, wire, aux = item
                        yield from lib.send_path(dest, data, None, wire=wire, aux=aux)
                        if wire == W.K_MCAST:
                            self.st["forwarded"] += 1
                except WouldBlock:
                    return
                self.queue.popleft()
        finally:
            self.servicing = False

    # -- fetch-and-add --------------------------------------------------------------------------

    def fa_start(self, dest: int, inc: int) -> FetchAddOp:
        lib = self.lib
        lib.check_dest(dest)
        if not isinstance(inc, int) or isinstance(inc, bool) or not -(1 << 31) <= inc < (1 << 32):
            raise OSError(errno.EINVAL, f"a fetch-and-add increment is a 32-bit int, not {inc!r}")
        if self.fa_op is not None and self.fa_op.value is None:
            raise OSError(errno.EBUSY, "a fetch-and-add of this process is still waiting for its reply")
        op = self.fa_op = FetchAddOp(dest, inc & MASK32)
        return op

    def fa_path(self, op: FetchAddOp, since=None):
        lib = self.lib
        if not op.sent:
            yield from lib.send_path(op.dest, b"", since, wire=W.K_FA_REQ, aux=op.inc)
            op.sent = True
            self.st["fa_sent"] += 1
            since = None
        if op.value is None:
            yield from lib.poll_path(since)
        if op.value is None:
            raise WouldBlock(lib.events, "LCI: waiting for the fetch-and-add reply")
        return op.value


def _lines(n: int, line: int = 64) -> int:
    return max(line, -(-n // line) * line)
