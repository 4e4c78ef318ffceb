"""LCI's multicast groups and spanning trees (LCI-A50..A52, C10, C21).

A multicast goes down a spanning tree of its group rooted at the sender. The tree is
not stored per root: every member numbers the group's sorted member list 0..n-1, and
the sender's tree is the tree of *relative* ranks ``(rank - rank(root)) mod n`` -- so
each NI's forwarding table is just the member list and the tree's shape, written by
the host at initialisation (2 bytes per member), and the children of any root are a
few integer operations away. That is what keeps a 1024-node NI's table small.

Shapes (``tree=``):

* ``binary`` (LCI's default, LCI-A50): fan-out 2, children 2r+1 and 2r+2;
* ``k=F`` (any fan-out F >= 1: F=1 is a chain): children F*r+1 .. F*r+F;
* ``binomial`` (MPICH's, LCI-C21; the root's fan-out is log2 n: 6 at 64 nodes,
  LCI-A51): children r + 2^j for every 2^j below r's lowest set bit, the largest
  subtree first, as MPICH sends.

Groups (``groups=``): one broadcast group of all nodes unless given (LCI-A52); groups
may not overlap (LCI-A50: overlapping trees could deadlock store-and-forward), and
that is refused with EINVAL naming the node in two.
"""
from __future__ import annotations

import errno

__all__ = ["Tree", "parse_tree", "parse_groups", "Group"]


class Tree:
    """A tree shape over relative ranks 0..n-1."""

    __slots__ = ("kind", "fanout")

    def __init__(self, kind: str, fanout: int = 2):
        self.kind = kind
        self.fanout = fanout

    @property
    def name(self) -> str:
        if self.kind == "binomial":
            return "binomial"
        return "binary" if self.fanout == 2 else f"k={self.fanout}"

    def children(self, rel: int, n: int) -> list:
        """The relative ranks `rel` sends to, in the order it sends."""
        if self.kind == "binomial":
            out = []
            mask = 1
            while mask < n and not rel & mask:
                mask <<= 1
            mask >>= 1
            while mask:
                if rel + mask < n:
                    out.append(rel + mask)
                mask >>= 1
            return out
        k = self.fanout
        first = k * rel + 1
        return list(range(first, min(first + k, n)))

    def parent(self, rel: int) -> int:
        if rel == 0:
            return -1
        if self.kind == "binomial":
            return rel & (rel - 1)
        return (rel - 1) // self.fanout

    def depth(self, n: int) -> int:
        """Hops from the root to the deepest member."""
        d = 0
        for r in range(n):
            h, x = 0, r
            while x:
                x = self.parent(x)
                h += 1
            d = max(d, h)
        return d

    def __repr__(self):
        return f"<{self.name} tree>"


def parse_tree(spec) -> Tree:
    """``binary``, ``binomial`` or ``k=F``; EINVAL with the reason otherwise."""
    if isinstance(spec, Tree):
        return spec
    if not isinstance(spec, str):
        raise OSError(errno.EINVAL, f"lci: a multicast tree is binary, binomial or k=F, not {spec!r}")
    s = spec.strip().lower()
    if s == "binary":
        return Tree("kary", 2)
    if s == "binomial":
        return Tree("binomial")
    if s.startswith("k="):
        try:
            k = int(s[2:])
        except ValueError:
            k = 0
        if not 1 <= k <= 1024:
            raise OSError(errno.EINVAL, f"lci: tree fan-out in {spec!r} must be an integer 1..1024")
        return Tree("kary", k)
    raise OSError(errno.EINVAL, f"lci: a multicast tree is binary, binomial or k=F (fan-out F), not {spec!r}")


class Group:
    """One multicast group: its sorted members and the tree shape."""

    __slots__ = ("members", "index", "tree")

    def __init__(self, members, tree: Tree):
        ms = sorted(members)
        if ms and ms == list(range(ms[0], ms[-1] + 1)):
            self.members = range(ms[0], ms[-1] + 1)        # compact: the usual all-nodes group
            self.index = None
        else:
            self.members = tuple(ms)
            self.index = {m: i for i, m in enumerate(ms)}
        self.tree = tree

    def __len__(self):
        return len(self.members)

    def __contains__(self, nid):
        return (nid in self.members) if self.index is None else nid in self.index

    def rank(self, nid: int) -> int:
        if self.index is None:
            return nid - self.members[0] if nid in self.members else -1
        return self.index.get(nid, -1)

    def children(self, me: int, root: int) -> list:
        """The members `me` forwards a multicast from `root` to (empty if either is not in it)."""
        n = len(self.members)
        a, b = self.rank(me), self.rank(root)
        if a < 0 or b < 0:
            return []
        rel = (a - b) % n
        return [self.members[(b + c) % n] for c in self.tree.children(rel, n)]

    def parent(self, me: int, root: int) -> int:
        n = len(self.members)
        a, b = self.rank(me), self.rank(root)
        if a < 0 or b < 0 or a == b:
            return -1
        return self.members[(b + self.tree.parent((a - b) % n)) % n]

    def table_bytes(self) -> int:
        """SRAM the NI's forwarding table takes: two bytes per member and a word of shape."""
        return 2 * len(self.members) + 4


def _member_list(text: str, spec: str) -> list:
    out = []
    for part in text.split("+"):
        part = part.strip()
        try:
            if "-" in part:
                a, b = (int(x) for x in part.split("-", 1))
                if b < a:
                    raise ValueError
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise OSError(errno.EINVAL, f"lci: bad member {part!r} in groups={spec!r} (members are N or A-B, "
                                        "joined by '+', groups separated by '/')") from None
    return out


def parse_groups(spec: str, nodes) -> list:
    """``groups=`` as lists of node ids: '' is one group of every node; '0-31/32-63' two."""
    nodes = set(nodes)
    if not spec:
        return [sorted(nodes)]
    groups, seen = [], {}
    for gi, text in enumerate(spec.split("/")):
        ms = _member_list(text, spec)
        if len(ms) < 2:
            raise OSError(errno.EINVAL, f"lci: multicast group {text!r} has fewer than two members")
        for m in ms:
            if m not in nodes:
                raise OSError(errno.EINVAL, f"lci: node {m} of multicast group {text!r} is not on the Myrinet")
            if m in seen:
                why = "twice in one group" if seen[m] == gi else "in two multicast groups"
                raise OSError(errno.EINVAL, f"lci: node {m} is {why}: groups may not overlap (LCI-A50)")
            seen[m] = gi
        groups.append(sorted(ms))
    return groups
