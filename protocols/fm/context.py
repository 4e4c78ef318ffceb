"""One FM context: the library state of one process, its transports and its streams.

Everything here runs in the user process (FM is a user-level library: the LANai's
memory and the pinned region are mapped into it, FM-C05), as *paths* -- generators
yielding CPU seconds -- submitted on the process's own CPU by ``libdp.fm``. A path that
cannot go on (no credit, no send slot, nothing arrived) raises `WouldBlock` with the
context's event queue; the caller waits there and runs the path again, which takes up
where it stopped (the stream keeps its place). In real time the same paths run straight
through and the caller spins.

**Transports** (FM-C08). A peer on another host is reached over the network port --
Myrinet, through this context's send ring in LANai SRAM and its slice of the pinned
receive region -- and a peer on the same host over the shared-memory transport (when
the module has it), as the job's placement says (the global resource manager's map of
virtual nodes to hosts, FM-C08). `extract` polls them one after another, the network
first: no adaptive polling, since all cost about the same.

**Send** (FM-B19a, FM-C03). ``begin`` opens a stream to a peer and handler with the
message's length; ``piece`` adds data; ``end`` closes it. Data goes out in packets of
at most 2048 bytes (FM-A04): over the network the host PIOs each piece straight into the
packet's slot in SRAM (FM-A02) -- in pacing-size chunks if the module paces (FM-C13) --
then the 32-byte header, then rings the doorbell; over the SMT it copies into a claimed
frame and publishes it (FM-C10). Every packet, full or partial, takes one credit from
the peer's fixed allowance; a sender out of credits keeps extracting while it waits,
which is what lets two hosts that send to each other both go on (FM-C03).

**Receive** (FM-C04, FM-C07). ``extract`` takes packets in order from each transport,
up to a byte budget. A message's first packet starts its handler -- an ``async def
handler(stream, src)`` that awaits ``stream.receive(n)`` for each piece it wants, in its
own buffers (FM 2.x's threaded handlers, FM-B19a): a handler that wants more than has
arrived is suspended until the message's next packet does. What a handler does not
take is dropped when it returns. Each consumed packet owes its sender a credit back:
credits ride on every packet going the other way and, when enough are owed, go back in
a refill packet of their own (Myrinet) or as the count the receiver keeps in shared
memory (SMT).

**Notification** (FM-C06, FM-C07). ``notify=memory``: the host polls the flag word at
the end of the next slot of its region, in its cache; a DMA that writes it invalidates
the line and the next poll misses once and sees it. ``notify=pci``: the host reads the
LCP's delivered count across the PCI bus; each poll is a bus transaction that the NI's
DMA waits for, or is cut by (``kernelsim._pcibus``). A waiting process is not
simulated poll by poll in memory mode (a poll costs the bus nothing); in PCI mode each
poll read is put on the modeled bus, since those reads are the point.
"""
from __future__ import annotations

import errno

from kernelsim import OpenFile, WaitQueue, WouldBlock

from protocols.fm import _wire
from protocols.fm._smtport import Peer
from protocols.fm._receive import MAX_HANDLERS, ContextCore, HandlerRuleError, RecvStream
from protocols.fm.lcp import (CB_TX_WAIT, CX_DELIVERED, CX_SEND_PROD, MAX_INSTANCES, ROUTE_AREA, TRAILER_FULL)

__all__ = ["FmContext", "SendStream", "RecvStream", "HandlerRuleError", "STAT_KEYS", "MAX_HANDLERS"]

MAX_MESSAGE = (1 << 32) - 1
MASK32 = 0xFFFFFFFF
DATA = _wire.DATA_BYTES
HDR = _wire.HDR_BYTES
STAT_KEYS = ("messages_sent", "packets_sent", "bytes_sent", "messages_received", "packets_received",
             "bytes_received", "handlers_run", "extracts", "empty_polls", "pci_polls", "credit_waits",
             "slot_waits", "refills_sent", "dropped_unknown_handler", "dropped_unknown_peer", "dropped_malformed",
             "dropped_after_handler")


class SendStream:
    """A message being sent (FM_begin_message .. FM_end_message)."""

    __slots__ = ("ctx", "peer", "length", "handler", "sent", "ended", "seq", "pkt", "pkt_off", "pkt_fill",
                 "pending", "ppos")

    def __init__(self, ctx, peer, length, handler):
        self.ctx = ctx
        self.peer = peer
        self.length = length
        self.handler = handler
        self.sent = 0              # bytes handed to packets
        self.ended = False
        self.seq = peer.seq
        self.pkt = None            # the packet being filled: a send slot or an SMT frame
        self.pkt_off = 0           # message offset of its first data byte
        self.pkt_fill = 0          # data bytes in it
        self.pending = None        # a piece not yet all in packets (a send_piece that waited)
        self.ppos = 0

    def __repr__(self):
        return f"<FM send stream to node {self.peer.vnode}, handler {self.handler}: {self.sent}/{self.length} bytes" \
               f"{', ended' if self.ended else ''}>"


class _Costs:
    """FM's costs in seconds on this node: the module's cycle counts at this CPU's clock."""

    def __init__(self, node, params):
        cyc = node.costs.cycles
        c = node.costs
        self.copy = c.copy
        self.copy_base = c.copy_base
        self.copy_rate = c.copy_rate
        self.miss = c.mem_miss
        for key in ("send", "packet", "piece", "extract", "dispatch", "handler", "receive", "poll", "smt_poll"):
            setattr(self, key, cyc(params[f"{key}_cycles"]))
        self.atomic = cyc(node.profile.get("cpu.atomic_cycles", 28))


class FmContext(OpenFile):
    """The FM state of one process (an open file: closing it ends the context)."""

    kind = "FM context"

    def __init__(self, service, proc, index, program, placement, vnode):
        super().__init__(proc.node)
        node = proc.node
        self.service = service
        self.proc = proc
        self.cpu = proc.cpu
        self.node = node
        self.engine = node.engine
        self.index = index                   # context slot on this host (LANai table entry)
        self.program = program
        self.placement = tuple(placement)
        self.vnode = vnode
        self.instance = self.placement[:vnode].count(self.placement[vnode])
        self.params = service.params
        self.c = c = _Costs(node, service.params)
        self.events = WaitQueue(node.engine)
        self.handlers: dict = {}
        self.hdr = _wire.Header()
        self.in_handler = False
        self.closed = False
        self.fd = -1
        self.stats_c = dict.fromkeys(STAT_KEYS, 0)
        self.peers: list[Peer | None] = []
        self.by_addr: dict = {}              # (host, instance) -> Peer
        self.net = None
        self.smt = None
        self._waiting = False
        self._woken_by = None
        self.core = ContextCore(self)
        self.wakes = 0                       # events so far (arrivals, credits, slots)
        self.wakes_seen = 0                  # ... when the last path started: one since means look again

    # -- set-up (the kernel calls these from fm_open) ----------------------------------------

    def build_peers(self, net, smt) -> None:
        """Pick each peer's transport and give it its credits (EHOSTUNREACH if none reaches it)."""
        self.net, self.smt = net, smt
        self.core.smt = smt
        me_host = self.placement[self.vnode]
        seen: dict = {}
        nnet = nsmt = 0
        for v, host in enumerate(self.placement):
            inst = seen.get(host, 0)
            seen[host] = inst + 1
            if v == self.vnode:
                self.peers.append(None)
                continue
            on_smt = host == me_host and smt is not None
            if not on_smt and net is None:
                raise OSError(errno.EHOSTUNREACH, f"fm: node {v} (host {host}) needs a network transport, and fm "
                                                  "was loaded with net=null")
            p = Peer(v, host, inst, on_smt)
            self.peers.append(p)
            self.by_addr[(host, inst)] = p
            if on_smt:
                self.core.smt_peers[inst] = p
                nsmt += 1
            else:
                nnet += 1
        want = self.params["credits"]
        if nnet:
            per = want or net.slots // nnet
            if per < 1 or per * nnet > net.slots:
                raise OSError(errno.EINVAL, f"fm: {nnet} network peers at {want or per} credits each do not fit "
                                            f"the {net.slots}-packet receive region (raise max_hosts)")
        if nsmt:
            per_smt = want or smt.region.nframes // nsmt
            if per_smt < 1 or per_smt * nsmt > smt.region.nframes:
                raise OSError(errno.EINVAL, f"fm: {nsmt} shared-memory peers at {want or per_smt} credits each do "
                                            f"not fit {smt.region.nframes} frames (raise smt_frames)")
        for p in self.peers:
            if p is not None:
                p.credits = per_smt if p.smt else per

    def stats(self) -> dict:
        out = dict(self.stats_c)
        self.core.add_counts(out)
        out.update(vnode=self.vnode, program=self.program, instance=self.instance,
                   peers={p.vnode: {"transport": "smt" if p.smt else "net", "credits": p.credits,
                                    "in_flight": p.sent - p.returned, "owed": p.consumed - p.credited}
                          for p in self.peers if p is not None})
        if self.net is not None:
            out["net"] = self.net.stats()
        if self.smt is not None:
            out["smt"] = self.smt.stats()
        return out

    # -- handlers ------------------------------------------------------------------------------

    def set_handler(self, hid: int, fn) -> None:
        if not isinstance(hid, int) or not 0 <= hid < MAX_HANDLERS:
            raise OSError(errno.EINVAL, f"handler IDs are 0..{MAX_HANDLERS - 1}, not {hid!r}")
        if fn is not None and not callable(fn):
            raise OSError(errno.EINVAL, "a handler is a function handler(stream, src)")
        if fn is None:
            self.handlers.pop(hid, None)
        else:
            self.handlers[hid] = fn

    def check_caller(self, what: str) -> None:
        if self.closed:
            raise OSError(errno.EBADF, "the FM context is closed")
        if self.in_handler:
            raise HandlerRuleError(errno.EDEADLK, f"{what} from inside an FM handler (handlers only receive)")

    # -- send ----------------------------------------------------------------------------------

    def begin(self, dest, length, handler) -> SendStream:
        """FM_begin_message: check and open the stream (no packet yet, so no cost)."""
        self.check_caller("begin_message")
        if not isinstance(dest, int) or not 0 <= dest < len(self.placement):
            raise OSError(errno.EHOSTUNREACH, f"no FM node {dest!r} in this job of {len(self.placement)} nodes")
        if dest == self.vnode:
            raise OSError(errno.EINVAL, "FM sends to other nodes, not to itself")
        if not isinstance(length, int) or not 0 <= length <= MAX_MESSAGE:
            raise OSError(errno.EMSGSIZE, f"an FM message is 0..{MAX_MESSAGE} bytes, not {length!r}")
        if not isinstance(handler, int) or not 0 <= handler < MAX_HANDLERS:
            raise OSError(errno.EINVAL, f"handler IDs are 0..{MAX_HANDLERS - 1}, not {handler!r}")
        peer = self.peers[dest]
        if peer.open_stream is not None:
            raise OSError(errno.EBUSY, f"a message to node {dest} is still open (end it first)")
        s = SendStream(self, peer, length, handler)
        peer.open_stream = s
        peer.seq = (peer.seq + 1) & MASK32
        return s

    def piece(self, s: SendStream, data) -> None:
        """FM_send_piece, checked: the data waits in the stream for `piece_path`."""
        self._check_stream(s)
        mv = memoryview(data).cast("B")
        if s.sent + (len(s.pending) - s.ppos if s.pending is not None else 0) + len(mv) > s.length:
            raise OSError(errno.EMSGSIZE, f"piece of {len(mv)} bytes goes past the message's declared "
                                          f"{s.length} bytes ({s.sent} sent)")
        if s.pending is not None and s.ppos < len(s.pending):
            raise OSError(errno.EBUSY, "the previous piece of this stream has not been sent yet")
        s.pending = mv
        s.ppos = 0

    def _check_stream(self, s) -> None:
        self.check_caller("send_piece")
        if not isinstance(s, SendStream) or s.ctx is not self:
            raise OSError(errno.EBADF, f"{s!r} is not a stream of this FM context")
        if s.ended:
            raise OSError(errno.EBADF, "the message has ended: no piece can follow end_message")

    def send_path(self, s: SendStream, end: bool):
        """Put the stream's pending piece into packets; with `end`, close the message."""
        self.wakes_seen = self.wakes
        pend = 0.0 if s.sent or s.pkt is not None else self.c.send
        if s.pending is not None:
            pend += self.c.piece
        peer = s.peer
        if end and peer.smt and s.pkt is None and s.sent == 0 and s.pending is not None \
                and len(s.pending) == s.length <= DATA:
            # A message of one packet over shared memory: the transport's one-call lane.
            cost = self.smt.send_one(peer, self.node.nid, self.program, s.handler, s.seq, s.pending)
            if cost >= 0:
                yield pend + cost
                self.smt.publish_pending()
                s.pending = None
                s.sent = s.length
                s.ended = True
                peer.open_stream = None
                st = self.stats_c
                st["messages_sent"] += 1
                st["packets_sent"] += 1
                st["bytes_sent"] += s.length
                return s.sent
        while s.pending is not None and s.ppos < len(s.pending):
            if s.pkt is None:
                pend = yield from self._open_packet(s, pend)
            n = min(len(s.pending) - s.ppos, DATA - s.pkt_fill)
            pend = yield from self._write(s, s.pending[s.ppos:s.ppos + n], pend)
            s.ppos += n
            s.pkt_fill += n
            s.sent += n
            if s.pkt_fill == DATA and s.sent < s.length:
                pend = yield from self._close_packet(s, pend)
        s.pending = None
        if end:
            if s.sent < s.length:
                raise OSError(errno.EINVAL, f"end_message after {s.sent} of the declared {s.length} bytes "
                                            "(send the rest first)")
            if s.pkt is None and (s.sent == 0 or s.pkt_off < s.sent):
                pend = yield from self._open_packet(s, pend)        # an empty message is one packet
            if s.pkt is not None:
                pend = yield from self._close_packet(s, pend)
            s.ended = True
            s.peer.open_stream = None
            self.stats_c["messages_sent"] += 1
        if pend:
            yield pend
        return s.sent

    def _open_packet(self, s, pend):
        """A slot (or frame) and a credit for the stream's next packet; while there is
        none, extract (FM-C03), and if still none, wait."""
        peer = s.peer
        port = self.smt if peer.smt else self.net
        while True:
            if peer.sent - self._returned(peer) < peer.credits:
                if peer.smt:
                    idx = port.claim(peer)
                    pend += port.claim_cost()
                    pkt = (peer.rid, idx) if idx >= 0 else None
                else:
                    pkt = port.open_slot()
                if pkt is not None:
                    break
                what = "slot_waits"
            else:
                what = "credit_waits"
            self.stats_c[what] += 1
            if self.params["extract_on_wait"]:
                pend, _n = yield from self._extract(pend, None)
                if peer.sent - self._returned(peer) < peer.credits and (peer.smt or port.slot_free()):
                    continue
            if not peer.smt and what == "slot_waits":
                pend = yield from port.want_slot(pend)
            if pend:
                yield pend
            self._arm_wait()
            raise WouldBlock(self.events, f"FM: no {'credit' if what == 'credit_waits' else 'send slot'} for node "
                                          f"{peer.vnode}")
        s.pkt = pkt
        s.pkt_off = s.sent
        s.pkt_fill = 0
        peer.sent += 1
        if s.sent:
            pend += self.c.packet
        # The message's length was declared at begin, so the packet's header is known now:
        # it goes first, and the data follows it in one stream of writes (FM-B19a).
        h = self.hdr
        h.kind = _wire.DATA
        h.plen = min(DATA, s.length - s.sent)
        h.flags = (_wire.FIRST if s.sent == 0 else 0) | (_wire.LAST if s.sent + h.plen == s.length else 0)
        h.src = self.node.nid
        h.dst = peer.host
        h.program = self.program
        h.src_inst = self.instance
        h.dst_inst = peer.inst
        h.handler = s.handler
        h.mlen = s.length
        h.offset = s.sent
        h.seq = s.seq
        h.credits = peer.consumed & MASK32
        if peer.smt:
            return pend + port.header(pkt[0], pkt[1], h)
        peer.credited = peer.consumed                   # the refill rides along
        return (yield from port.header(self, pkt, h, pend))

    def _returned(self, peer) -> int:
        if peer.smt:
            return self.smt.returned(peer)
        else:
            v = self.net.credit_word(peer)
            if ((v - peer.returned) & MASK32) < 1 << 31 and v != peer.returned:
                peer.returned = v
        return peer.returned

    def _write(self, s, data, pend):
        if s.peer.smt:
            return pend + self.smt.write(s.pkt[0], s.pkt[1], HDR + s.pkt_fill, data)
        return (yield from self.net.write(self, s.pkt, HDR + s.pkt_fill, data, pend))

    def _close_packet(self, s, pend):
        """The packet is full (or the message ends): hand it over."""
        peer = s.peer
        if peer.smt:
            yield pend + self.smt.publish_cost            # visible to the receiver from this instant
            pend = self.smt.publish(s.pkt[0], s.pkt[1], s.pkt_fill)
        else:
            pend = yield from self.net.commit(self, peer, s.pkt, s.pkt_fill, pend)
        self.stats_c["packets_sent"] += 1
        self.stats_c["bytes_sent"] += s.pkt_fill
        s.pkt = None
        return pend

    # -- receive -------------------------------------------------------------------------------

    def extract_path(self, budget=None, since=None):
        """FM_extract: run handlers for what has arrived, up to `budget` data bytes."""
        pend = self.c.extract + self._wake_cost(since)
        pend, n = yield from self._extract(pend, budget)
        if pend:
            yield pend
        return n

    def wait_path(self, pred, since=None):
        """Extract until ``pred()``; WouldBlock while it is false and nothing arrives."""
        pend = self.c.extract + self._wake_cost(since)
        pend, _n = yield from self._extract(pend, None)
        if pend:
            yield pend
        if not pred():
            self._arm_wait()
            raise WouldBlock(self.events, "FM: waiting for messages")
        return True

    def _wake_cost(self, since) -> float:
        """A process that spun until an event: the poll that saw it (half a round on
        average in memory mode; in PCI mode the modeled poll reads already took it)."""
        self._waiting = False
        self.wakes_seen = self.wakes
        woken, self._woken_by = self._woken_by, None
        if since is None or woken == "pci":
            return 0.0
        return 0.5 * self.poll_round()

    def poll_round(self) -> float:
        """CPU time of one empty pass over the transports (FM-A07, FM-A08)."""
        t = 0.0
        if self.net is not None:
            t += self.c.poll
        if self.smt is not None:
            t += self.c.smt_poll * self.smt.region.nqueues
        return t

    def _extract(self, pend, budget):
        self.check_caller("extract")
        self.stats_c["extracts"] += 1
        left = budget if budget is not None else 1 << 62
        n = 0
        for port in (self.net, self.smt):
            if port is None:
                continue
            while left > 0:
                if port is self.smt:
                    pkt = port.poll()
                    pend += port.poll_cost(pkt >= 0)
                    if pkt < 0:
                        break
                else:
                    pkt, pend = yield from port.poll(self, pend)
                    if pkt is None:
                        break
                pend, got = yield from self._deliver(port, pkt, pend)
                left -= max(got, 1)
                n += 1
        if self.net is not None:
            pend = yield from self._refill(pend)
        if not n:
            self.stats_c["empty_polls"] += 1
        return pend, n

    def _deliver(self, port, pkt, pend):
        """One packet: check it, run or resume its message's handler, free its slot."""
        view, off, nbytes = port.packet(pkt) if port is self.smt else port.packet(self, pkt)
        h = self.hdr
        rc = h.parse(view, off, nbytes)
        peer, got, cost = self._accept(port is self.smt, rc, h, view, off)
        pend += cost
        if port is self.smt:
            port.release(pkt)
        else:
            pend = yield from port.release(self, pkt, peer, pend)
        if peer is not None:
            peer.consumed += 1
        return pend, got

    def _accept(self, smt, rc, h, view, off):
        """A parsed packet for this context: its peer (None if dropped), its data bytes,
        and the CPU time of dispatching it and running its handler."""
        cost = self.c.dispatch
        if rc or h.kind != _wire.DATA or h.program != self.program or h.dst_inst != self.instance:
            self.stats_c["dropped_malformed"] += 1
            return None, 0, cost
        peer = self.by_addr.get((h.src, h.src_inst))
        if peer is None or peer.smt != smt:
            self.stats_c["dropped_unknown_peer"] += 1
            return None, 0, cost
        self.stats_c["packets_received"] += 1
        self.stats_c["bytes_received"] += h.plen
        if not smt and ((h.credits - peer.returned) & MASK32) < 1 << 31:
            peer.returned = h.credits            # a piggybacked refill
        return peer, h.plen, cost + self.core.run_handler(peer, h, view, off + HDR)

    # -- real time: the shared-memory transport walked by the caller's own poll ----------------

    def extract_now(self, budget=None) -> int:
        """Real time FM_extract over the shared-memory transport alone (``net=null``):
        the caller's own poll walks the queues (`ContextCore.extract_smt`) -- no path, no
        generator, no yield."""
        self.check_caller("extract")
        return self.core.extract_smt(self.smt, budget if budget is not None else 1 << 62)

    def _refill(self, pend):
        """Explicit credit refills to network peers that are owed enough (FM-C03)."""
        div = self.params["refill_div"]
        for p in self.peers:
            if p is None or p.smt or p.consumed - p.credited < max(1, p.credits // div):
                continue
            if not self.net.slot_free():
                pend = yield from self.net.want_slot(pend)      # the LCP reports freed slots at once
                break
            h = self.hdr
            h.kind = _wire.CREDIT
            h.flags = 0
            h.src = self.node.nid
            h.dst = p.host
            h.program = self.program
            h.src_inst = self.instance
            h.dst_inst = p.inst
            h.handler = h.plen = 0
            h.mlen = h.offset = h.seq = 0
            h.credits = p.consumed & MASK32
            p.credited = p.consumed
            slot = self.net.open_slot()
            pend = yield from self.net.header(self, slot, h, pend)
            pend = yield from self.net.commit(self, p, slot, 0, pend)
            self.stats_c["refills_sent"] += 1
        return pend

    # -- waiting -------------------------------------------------------------------------------

    def _arm_wait(self) -> None:
        """About to wait: have the transports wake us (and, in PCI mode, start polling the bus)."""
        self._waiting = True
        if self.net is not None:
            self.net.arm(self)

    def wake(self, how: str) -> None:
        self.wakes += 1
        if self._waiting:
            self._woken_by = how
            self._waiting = False
        self.events.wake()

    def peers_ready(self) -> bool:
        """Is every node of the job up? (modeled: the GRM; real time: the shared region's map)"""
        if self.node.modeled:
            up = self.service.grm.all_up(self.program, len(self.placement))
        else:
            up = all(self.smt.region.lookup(p.inst) >= 0 for p in self.peers if p is not None and p.smt)
        if up and self.smt is not None:
            for p in self.peers:
                if p is not None and p.smt and p.rid < 0:
                    self.smt.rid_of(p)        # from now on, a peer missing from the map has left (EPIPE)
        return up

    def ready(self) -> bool:
        """Real time: has anything this context waits for come? (the spin's poll)"""
        return (self.smt is not None and self.smt.region.poll(self.smt.me) >= 0) or \
            (self.net is not None and self.net.has_packet(self))

    # -- end -----------------------------------------------------------------------------------

    def close_path(self, since=None):
        """Before the context goes: wait until the LCP has sent every packet we committed."""
        self.wakes_seen = self.wakes
        net = self.net
        if net is None or ((net.prod - net._tx_done()) & MASK32) == 0:
            return 0
        pend = yield from net.want_slot(0.0)      # the waiting bit: the LCP reports each send at once
        if pend:
            yield pend
        self._arm_wait()
        raise WouldBlock(self.events, "FM: close waits for the send ring to drain")

    def release(self, proc) -> None:
        """Last close: leave the transports; the kernel frees the context."""
        if self.closed:
            return
        self.closed = True
        self.service.context_closed(self)
