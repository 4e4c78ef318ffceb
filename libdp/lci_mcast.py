"""Host-level broadcast over LCI unicast, as MPICH does it (LCI-C21: I-sdma-mpimc).

    from libdp.lci_mcast import Inbox, mpich_bcast

    inbox = Inbox()
    lci = await LCI.open(dp, upcall=inbox)
    data = await mpich_bcast(lci, inbox, root=0, data=payload if rank == 0 else None, nbytes=len(payload))

MPICH's default broadcast forwards whole *messages* on the host: a node receives the
entire message from its parent before it sends it on, child by child (the largest
subtree first), over point-to-point sends -- no pipelining down the tree, unlike LCI's
packet forwarding on the NI (C10) or host (C20). MPICH always uses a binomial tree;
the paper's authors added binary trees (``tree="binary"``). The module's own multicast
is ``lci.bcast``; this is the comparison the paper makes in section 7.4.
"""
from __future__ import annotations

import errno
from collections import defaultdict, deque

from protocols.lci.trees import Group, parse_tree

__all__ = ["Inbox", "mpich_bcast", "packets"]


def packets(nbytes: int, mtu: int) -> int:
    """LCI packets a message of `nbytes` takes (an empty message is one packet)."""
    return max(1, -(-nbytes // mtu))


class Inbox:
    """An upcall keeping each sender's packets in arrival (FIFO) order until a message is
    taken; with `buf`, each packet is also copied into that user buffer (the receive
    copy of a real application), at its place in the message."""

    def __init__(self, buf=None, mtu: int = 2048):
        self.q = defaultdict(deque)
        self.buf = buf
        self.mtu = mtu
        self.pos = defaultdict(int)
        self.count = 0

    def __call__(self, pkt):
        self.count += 1
        if self.buf is not None:
            off = self.pos[pkt.src]
            if pkt.length:
                pkt.copy_to(self.buf, min(off, self.buf.size - pkt.length))
            self.pos[pkt.src] = off + pkt.length
        self.q[pkt.src].append(pkt.data)
        return False

    def have(self, src: int, k: int) -> bool:
        return len(self.q[src]) >= k

    async def recv(self, lci, src: int, nbytes: int) -> bytes:
        """The next message of `nbytes` from `src` (polls until all its packets are in)."""
        k = packets(nbytes, lci.mtu)
        q = self.q[src]
        await lci.poll_until(lambda: len(q) >= k)
        self.pos[src] = 0
        return b"".join(q.popleft() for _ in range(k))[:nbytes]


async def send_message(lci, dest: int, data: bytes) -> None:
    mtu = lci.mtu
    if not data:
        await lci.send(dest, b"")
        return
    for off in range(0, len(data), mtu):
        await lci.send(dest, data[off:off + mtu])


async def mpich_bcast(lci, inbox: Inbox, root: int, data=None, nbytes: int | None = None, tree="binomial",
                      members=None) -> bytes:
    """Broadcast `data` (given at the root) of `nbytes` to every member; returns the message."""
    t = parse_tree(tree)
    if members is None:
        g = lci.group
        if g is None:
            raise OSError(errno.EINVAL, "no multicast group to broadcast to: give members=")
        members = g["members"]
    group = Group(members, t)
    me = lci.nid
    if root not in group or me not in group:
        raise OSError(errno.EINVAL, f"root {root} and node {me} must both be members of the group")
    if me == root:
        if not isinstance(data, (bytes, bytearray)):
            raise OSError(errno.EINVAL, "the root of a broadcast gives the data (bytes)")
        data = bytes(data)
    else:
        if nbytes is None or nbytes < 0:
            raise OSError(errno.EINVAL, "a receiver of a broadcast gives its size (nbytes)")
        data = await inbox.recv(lci, group.parent(me, root), nbytes)
    for child in group.children(me, root):
        await send_message(lci, child, data)
    return data
