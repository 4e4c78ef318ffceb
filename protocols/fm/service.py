"""The kernel's part of FM: the board, the shared-memory regions, and ``fm_open``.

FM needs the kernel only to set things up (FM-C05): map the LANai's memory and pin the
receive region (``board.py``), lay out or join a job's shared-memory region, and hand a
process its context -- an open file -- through one system call:

    fm_open(program, placement, vnode) -> fd

`program` is the job's program ID (what the global resource manager hands out,
FM-C05), `placement` the host of each of the job's FM nodes (its map of virtual nodes
to hosts, FM-C08), `vnode` the calling process's node in it. The process's *instance*
-- its place among the job's nodes on this host -- picks its entry in the LCP's table
and its SMT ID's map slot. EBUSY when every context of the host is taken, EADDRINUSE
when that node of that program is open already. Each open context holds a reference
on the module: ``rmmod fm`` is EBUSY while one lives.
"""
from __future__ import annotations

import errno

from kernelsim import WaitQueue
from protocols.fm.context import STAT_KEYS, FmContext
from protocols.fm.transports import RealSmtHost, SmtHost

__all__ = ["FmService", "Grm"]

MAX_PROGRAM = 0xFFFF


class Grm:
    """The part of HPVM's global resource manager the model needs: which nodes of each
    job are up, so that ``FM.open`` returns only once its whole job is (as
    FM_initialize does). One serves every node on a network (it hangs on the modeled
    Myrinet fabric); a host with shared memory only has its own. In real time the
    shared region's map of instances plays its part."""

    def __init__(self, engine):
        self.up: dict = {}
        self.events = WaitQueue(engine)

    @classmethod
    def of(cls, node, board) -> "Grm":
        fabric = board.ni.port if board is not None else None
        if fabric is None:
            return cls(node.engine)
        grm = getattr(fabric, "fm_grm", None)
        if grm is None:
            grm = fabric.fm_grm = cls(node.engine)
        return grm

    def register(self, program, vnode) -> None:
        self.up.setdefault(program, set()).add(vnode)
        self.events.wake()

    def unregister(self, program, vnode) -> None:
        self.up.get(program, set()).discard(vnode)

    def all_up(self, program, nodes) -> bool:
        return len(self.up.get(program, ())) >= nodes


class FmService:
    def __init__(self, kernel, params: dict, board):
        self.node = kernel
        self.params = dict(params)
        self.board = board
        self.contexts: list = [None] * params["contexts"]
        self.smt_hosts: dict = {}
        self.opened = 0
        self.totals = dict.fromkeys(STAT_KEYS, 0)
        self.last_closed = None
        self.c_open = kernel.costs.cycles(params["open_cycles"])
        self.grm = Grm.of(kernel, board)

    def modinfo(self) -> dict:
        """What ``modinfo fm`` adds for the loaded module: what it chose at load."""
        out = {"net": self.params["net"], "notify": self.params["notify"],
               "smt": bool(self.params["smt"])}
        if self.board is not None:
            out["pacing"] = dict(self.board.pacing)
        return out

    # -- fm_open -------------------------------------------------------------------------------

    def sys_open(self, proc, program, placement, vnode):
        yield self.c_open
        if not isinstance(program, int) or not 0 <= program <= MAX_PROGRAM:
            raise OSError(errno.EINVAL, f"fm_open: a program ID is 0..{MAX_PROGRAM}, not {program!r}")
        placement = tuple(placement)
        if not placement or not all(isinstance(h, int) and h >= 0 for h in placement):
            raise OSError(errno.EINVAL, "fm_open: the placement names a host (node id) for every FM node of the job")
        if not isinstance(vnode, int) or not 0 <= vnode < len(placement):
            raise OSError(errno.EINVAL, f"fm_open: node {vnode!r} is not one of the job's {len(placement)} nodes")
        if placement[vnode] != self.node.nid:
            raise OSError(errno.EINVAL, f"fm_open: the job places node {vnode} on host {placement[vnode]}, "
                                        f"not on this one ({self.node.nid})")
        if len(placement) > (self.board.max_hosts * 16 if self.board is not None else 1 << 16):
            raise OSError(errno.EINVAL, "fm_open: the job has more nodes than the region is sized for")
        for c in self.contexts:
            if c is not None and c.program == program and c.vnode == vnode:
                raise OSError(errno.EADDRINUSE, f"fm_open: node {vnode} of program {program} is open already "
                                                f"(process {c.proc.pid})")
        try:
            k = self.contexts.index(None)
        except ValueError:
            raise OSError(errno.EBUSY, f"fm_open: all {len(self.contexts)} FM contexts of host {self.node.nid} "
                                       "are in use") from None
        ctx = FmContext(self, proc, k, program, placement, vnode)
        smt_host = smt_port = None
        net_port = None
        try:
            if self.params["smt"] and placement.count(self.node.nid) > 1:
                smt_host = self._smt_host(program)
                smt_port = smt_host.attach(ctx)
            if self.board is not None:
                net_port = self.board.open_ctx(k, ctx)
            ctx.build_peers(net_port, smt_port)
        except BaseException:
            if net_port is not None:
                self.board.close_ctx(k)
            if smt_port is not None:
                self._smt_leave(program, smt_host, smt_port)
            ctx._close_efd()
            raise
        self.contexts[k] = ctx
        self.grm.register(program, vnode)
        self.opened += 1
        self.node.modules.module_get("fm")
        ctx.fd = proc.fds.install(ctx)
        return ctx.fd

    def _smt_host(self, program):
        host = self.smt_hosts.get(program)
        if host is None:
            host = (SmtHost if self.node.modeled else RealSmtHost)(self.node, program, self.params)
            self.smt_hosts[program] = host
        return host

    def _smt_leave(self, program, host, port) -> None:
        if host.detach(port):
            host.free()
            self.smt_hosts.pop(program, None)

    def context_closed(self, ctx) -> None:
        if self.contexts[ctx.index] is not ctx:
            return
        self.contexts[ctx.index] = None
        self.grm.unregister(ctx.program, ctx.vnode)
        if ctx.net is not None:
            self.board.close_ctx(ctx.index)
        if ctx.smt is not None:
            self._smt_leave(ctx.program, ctx.smt.host, ctx.smt)
        st = ctx.stats()
        for k in STAT_KEYS:
            self.totals[k] += st.get(k, 0)
        self.last_closed = st
        self.node.modules.module_put("fm")

    def stats(self) -> dict:
        out = {"contexts_open": sum(c is not None for c in self.contexts), "contexts_opened": self.opened,
               "closed_totals": dict(self.totals)}
        if self.board is not None:
            out["board"] = self.board.stats()
        open_ = {c.vnode: c.stats() for c in self.contexts if c is not None}
        if open_:
            out["contexts"] = open_
        elif self.last_closed is not None:
            out["last_context"] = self.last_closed
        return out
