"""SP Active Messages as a process sees them: Generic Active Messages 1.1 (Table 1 of
the SP AM paper), trio-async and blocking.

    from libdp import Cluster
    from libdp.am import AM

    cluster = Cluster(nodes=2, nic="tb2", load=["am"])     # am takes the TB2s (DP steps aside)

    async def program(dp, rank, size):
        am = await AM.open(dp)
        got = []
        am.set_handler(1, lambda tok, x: tok.reply(2, x + 1))    # a request handler replies
        am.set_handler(2, lambda tok, x: got.append(x))          # a reply handler
        if rank == 0:
            await am.am_request_1(1, 1, 41)
            await am.poll_until(lambda: got)
        else:
            await am.poll_until(lambda: am.stats()["handlers_run"])
        await am.close()
        return got
    print(cluster.run_spmd(program))            # [[42], []]

The calls (``M`` = 1..4 32-bit words):

* ``am_request_M(dest, handler, a1..aM)`` -- run `handler` on node `dest`; returns once
  the message has been handed to the adapter; polls, like every request.
* ``am_reply_M(token, handler, a1..aM)`` -- from inside a request handler only, at most
  once (or ``token.reply(handler, *args)``); does not poll.
* ``am_store(dest, local_buf, remote_addr, nbytes, handler, arg)`` -- copy to the remote
  address; returns when the source may be reused; `handler(token, addr, nbytes, arg)`
  runs at `dest` once all the data has landed.
* ``am_store_async(..., on_done=None, done_arg=None)`` -- returns at once (a `Transfer`);
  ``on_done(done_arg)`` runs locally, inside a later poll, at the end.
* ``am_get(dest, remote_addr, local_buf, nbytes, handler, arg)`` -- fetch; the local
  `handler(token, addr, nbytes, arg)` runs inside a poll once the data is here.
* ``am_poll()`` -- handle what has arrived; handlers run only here (and in requests).
* ``poll_until(pred)`` -- ``while not pred(): am_poll()``, without modeling each spin.

Memory: ``seg = am.segment(nbytes)`` pins a segment; remote addresses must lie in the
target's segments (else the transfer fails with EFAULT at its initiator -- from
``am_store`` itself, or from the poll that learns it for the asynchronous calls -- and
the target is not touched); a local buffer is a Segment, an address inside one, or
(as a store's source) any bytes-like object.

Handlers are plain functions ``fn(token, *args)``; ``token.src`` is the sender's node.
Requesting, storing, getting or polling from inside a handler raises
`HandlerRuleError` (errno EDEADLK), as does a reply from a reply handler.
"""
from __future__ import annotations

import errno

from kernelsim import WouldBlock, run_path, wait_on_sync
from libdp import _am_call
from protocols.am.bulk import Transfer
from protocols.am.endpoint import HandlerRuleError, Segment, Token
from protocols.am.window import BLOCKED

__all__ = ["AM", "SyncAM", "Segment", "Token", "Transfer", "HandlerRuleError", "am_open"]


class AM:
    """The AM endpoint of one process (async calls; ``.sync`` for blocking ones)."""

    def __init__(self, dp, fd: int):
        self.dp = dp
        self.fd = fd
        self.ep = dp._proc.fds.get(fd)
        self.sync = SyncAM(self)

    @classmethod
    async def open(cls, dp, handlers=None) -> "AM":
        """am_open: map the node's TB2 FIFOs into this process (ENOSYS without the am
        module, EBUSY if another process has them). A process attached to a real node drives
        the card itself: ``dp`` becomes its own kernel's process (`libdp.attach`)."""
        dp = await dp.user_level("am") if hasattr(dp, "user_level") else dp
        fd = await dp._syscall("am_open", ())
        am = cls(dp, fd)
        am._install(handlers)
        return am

    @classmethod
    def open_sync(cls, dp, handlers=None) -> "AM":
        dp = dp.sync.user_level("am") if hasattr(dp, "user_level") else dp
        fd = dp.sync._call(lambda e: dp._node.syscall_path(dp._proc, "am_open", (), e), None, 0.0)
        am = cls(dp, fd)
        am._install(handlers)
        return am

    def _install(self, handlers) -> None:
        if handlers:
            items = handlers.items() if isinstance(handlers, dict) else enumerate(handlers)
            for i, fn in items:
                if fn is not None:
                    self.set_handler(i, fn)

    # -- tables and memory -----------------------------------------------------------------

    @property
    def nid(self) -> int:
        return self.dp.nid

    def set_handler(self, index: int, fn) -> None:
        self.ep.set_handler(index, fn)

    def segment(self, nbytes: int) -> Segment:
        return self.ep.segment(nbytes)

    def release_segment(self, seg: Segment) -> None:
        self.ep.release_segment(seg)

    def stats(self) -> dict:
        return self.ep.stats()

    # -- requests and replies -------------------------------------------------------------

    def am_request(self, dest: int, handler: int, *args):
        ep = self.ep
        if ep.closed or ep._handler_depth:
            ep.check_caller(f"am_request_{len(args)}")
        peer, msg = ep.request_msg(dest, handler, args)
        return _am_call.call(ep, self.dp, _am_call.REQUEST, peer, msg)

    def am_request_1(self, dest, handler, a1):
        return self.am_request(dest, handler, a1)

    def am_request_2(self, dest, handler, a1, a2):
        return self.am_request(dest, handler, a1, a2)

    def am_request_3(self, dest, handler, a1, a2, a3):
        return self.am_request(dest, handler, a1, a2, a3)

    def am_request_4(self, dest, handler, a1, a2, a3, a4):
        return self.am_request(dest, handler, a1, a2, a3, a4)

    def am_reply(self, token: Token, handler: int, *args) -> None:
        self.ep.reply(token, handler, args)

    def am_reply_1(self, token, handler, a1) -> None:
        self.ep.reply(token, handler, (a1,))

    def am_reply_2(self, token, handler, a1, a2) -> None:
        self.ep.reply(token, handler, (a1, a2))

    def am_reply_3(self, token, handler, a1, a2, a3) -> None:
        self.ep.reply(token, handler, (a1, a2, a3))

    def am_reply_4(self, token, handler, a1, a2, a3, a4) -> None:
        self.ep.reply(token, handler, (a1, a2, a3, a4))

    # -- bulk --------------------------------------------------------------------------------

    def am_store(self, dest, local_buf, remote_addr, nbytes, handler, arg=0):
        self.ep.check_caller("am_store")
        x = self.ep.store(dest, local_buf, nbytes, remote_addr, handler, arg, blocking=True)
        return _am_call.call(self.ep, self.dp, _am_call.TRANSFER, x, None, True)

    am_store_async = _am_call.am_store_async      # (am, dest, local_buf, remote_addr, nbytes, handler, arg=0,
                                                  #  on_done=None, done_arg=None): compiled, see its docstring

    def am_get(self, dest, remote_addr, local_buf, nbytes, handler, arg=0):
        """Start a get; the coroutine returns its `Transfer`."""
        return _am_call.get(self.ep, self.dp, dest, remote_addr, local_buf, nbytes, handler, arg)

    # -- polling -----------------------------------------------------------------------------

    async def am_poll(self) -> int:
        """Handle every message that has arrived; the number handled."""
        self.ep.check_caller("am_poll")
        return await run_path(self.dp._node, self.ep.poll_path())

    def poll_until(self, pred):
        """Poll until ``pred()`` is true (checked before the first poll). A coroutine."""
        return _am_call.poll_until(self.ep, self.dp, pred)

    async def wait(self, transfer: Transfer) -> Transfer:
        """Poll until an asynchronous store or get has finished; raise its error."""
        await self.poll_until(lambda: transfer.done)
        if transfer.error is not None:
            try:
                self.ep.pending_errors.remove(transfer.error)
            except ValueError:
                pass
            raise transfer.error
        return transfer

    async def close(self) -> None:
        """Acknowledge what we hold, wait (bounded) for our messages' acks, unmap.

        Works in any state -- also after a call failed with ETIMEDOUT because a peer
        stopped answering: what is still in flight is abandoned (counted in the
        statistics as ``abandoned``) and the endpoint is released, so ``rmmod am`` can
        follow. A second close is EBADF."""
        if self.ep.closed:
            raise OSError(errno.EBADF, "the AM endpoint is already closed")
        self.ep.check_caller("am_close")
        try:
            await _am_call.call(self.ep, self.dp, _am_call.CLOSE)
        finally:
            await self.dp.close(self.fd)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        if not self.ep.closed:
            await self.close()

    # The calls' loop -- run the path; while it says "not yet" (BLOCKED; WouldBlock in real
    # time), wait on the endpoint's events and run its continuation -- is compiled:
    # libdp/_am_call.pyx.


class SyncAM:
    """The same calls, blocking (modeled time moves inside each call)."""

    def __init__(self, am: AM):
        self._am = am
        self.ep = am.ep

    def _run(self, make_path):
        am, ep = self._am, self.ep
        node = am.dp._node
        since = None
        while True:
            try:
                r = node.run_now(make_path(since))
            except WouldBlock:
                r = BLOCKED
            if r is not BLOCKED:
                return r
            since = node.engine.now
            if not ep.ready():
                ep.arm_timer()
                wait_on_sync(node, ep.events, am.dp.spin_s)

    def am_request(self, dest: int, handler: int, *args):
        self.ep.check_caller(f"am_request_{len(args)}")
        peer, msg = self.ep.request_msg(dest, handler, args)
        return self._run(lambda since: self.ep.request_path(peer, msg, since))

    # The same calls as AM's, over the request above.
    am_request_1 = AM.am_request_1
    am_request_2 = AM.am_request_2
    am_request_3 = AM.am_request_3
    am_request_4 = AM.am_request_4
    am_reply = AM.am_reply
    am_reply_1 = AM.am_reply_1
    am_reply_2 = AM.am_reply_2
    am_reply_3 = AM.am_reply_3
    am_reply_4 = AM.am_reply_4

    def am_store(self, dest, local_buf, remote_addr, nbytes, handler, arg=0):
        self.ep.check_caller("am_store")
        x = self.ep.store(dest, local_buf, nbytes, remote_addr, handler, arg, blocking=True)
        return self._run(lambda since: self.ep.transfer_path(x, since, wait=True))

    def am_store_async(self, dest, local_buf, remote_addr, nbytes, handler, arg=0, on_done=None, done_arg=None):
        self.ep.check_caller("am_store_async")
        x = self.ep.store(dest, local_buf, nbytes, remote_addr, handler, arg, on_done, done_arg)
        self._run(lambda since: self.ep.transfer_path(x, since))
        return x

    def am_get(self, dest, remote_addr, local_buf, nbytes, handler, arg=0):
        self.ep.check_caller("am_get")
        x = self.ep.get(dest, remote_addr, local_buf, nbytes, handler, arg)
        self._run(lambda since: self.ep.transfer_path(x, since))
        return x

    def am_poll(self) -> int:
        self.ep.check_caller("am_poll")
        return self._am.dp._node.run_now(self.ep.poll_path())

    def poll_until(self, pred) -> None:
        self.ep.check_caller("am_poll")
        if pred():
            return
        self._run(lambda since: self.ep.wait_path(pred, since))

    def wait(self, transfer):
        self.poll_until(lambda: transfer.done)
        if transfer.error is not None:
            try:
                self.ep.pending_errors.remove(transfer.error)
            except ValueError:
                pass
            raise transfer.error
        return transfer

    def close(self) -> None:
        if self.ep.closed:
            raise OSError(errno.EBADF, "the AM endpoint is already closed")
        self.ep.check_caller("am_close")
        try:
            self._run(lambda since: self.ep.close_path(since))
        finally:
            self._am.dp.sync.close(self._am.fd)

    def set_handler(self, index, fn):
        self.ep.set_handler(index, fn)

    def segment(self, nbytes):
        return self.ep.segment(nbytes)


async def am_open(dp, handlers=None) -> AM:
    return await AM.open(dp, handlers)
