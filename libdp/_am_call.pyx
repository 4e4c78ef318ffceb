# cython: language_level=3
"""The loop every SP AM call of `libdp.am.AM` is, compiled: run the call's path on the
node's CPU; while it says "not yet" (`BLOCKED`; `WouldBlock` in real time), spin -- modeled
as a wait on the endpoint's events (an arrival, send-FIFO room, a keep-alive due) -- and
run its continuation, which counts the polls the spin made (``since``).

A ping-pong makes two of these per round trip on each side; written in Python, each
resume of the calling task passed through two more interpreted frames (the call and
this loop), and each call built a closure for its path.
"""
cimport cython
from kernelsim import WouldBlock, run_path, wait_on
from kernelsim._spin cimport EngineSpin, init_spin
from kernelsim._spin import spin
from protocols.am.window import BLOCKED
from protocols.am.window cimport Events
from protocols.am.endpoint cimport AmEndpoint

__all__ = ["call", "poll_until", "store_async", "get", "REQUEST", "TRANSFER", "WAIT", "CLOSE"]

cdef enum:
    _REQUEST = 0     # ep.request_path(peer, msg, since)
    _TRANSFER = 1    # ep.transfer_path(transfer, since, wait)
    _WAIT = 2        # ep.wait_path(pred, since)
    _CLOSE = 3       # ep.close_path(since)

REQUEST, TRANSFER, WAIT, CLOSE = _REQUEST, _TRANSFER, _WAIT, _CLOSE


cdef object _path(AmEndpoint ep, int what, a, b, bint wait, since):
    if what == _REQUEST:
        return AmEndpoint.request_path(ep, a, b, since)
    if what == _TRANSFER:
        return AmEndpoint.transfer_path(ep, a, since, wait)
    if what == _WAIT:
        return AmEndpoint.wait_path(ep, a, since)
    return ep.close_path(since)


async def call(AmEndpoint ep, dp, int what, a=None, b=None, bint wait=False):
    """Run the call `what` of endpoint `ep` for process `dp` to its end; its value."""
    node = dp._node
    since = None
    while True:
        try:
            r = await run_path(node, _path(ep, what, a, b, wait, since))
        except WouldBlock:
            r = BLOCKED
        if r is not BLOCKED:
            return r
        since = node.engine.now if node.modeled else dp.now()     # `dp.now()`, less its frame
        if not AmEndpoint.ready(ep):
            AmEndpoint.arm_timer(ep)
            await wait_on(node, ep.events, dp.spin_s)


async def poll_until(AmEndpoint ep, dp, pred):
    """``while not pred(): am_poll()`` (checked before the first poll)."""
    ep.check_caller("am_poll")
    if pred():
        return
    node = dp._node
    if node.modeled:
        await _spin(ep, node, pred, dp.spin_s)
        return
    since = None
    while True:
        try:
            r = await run_path(node, AmEndpoint.wait_path(ep, pred, since))
        except WouldBlock:
            r = BLOCKED
        if r is not BLOCKED:
            return
        since = dp.now()
        if not AmEndpoint.ready(ep):
            AmEndpoint.arm_timer(ep)
            await wait_on(node, ep.events, dp.spin_s)


# -- am_poll loops the engine runs (modeled time) --------------------------------------------
#
# A program's ``while (!flag) am_poll();`` in modeled time is an `EngineSpin` (see
# kernelsim/_spin.pyx): the engine runs its polls at the instants the task would have,
# the task parked once for the whole loop.

@cython.final
cdef class _AmSpin(EngineSpin):
    """One `poll_until` of an SP AM endpoint: each poll is its ``wait_path``."""
    cdef AmEndpoint ep
    cdef object pred

    cdef object poll_path(self, object since):
        return AmEndpoint.wait_path(self.ep, self.pred, since)

    cdef bint ends(self, object value) except -1:
        return value is not BLOCKED

    cdef bint ready(self) except -1:
        return AmEndpoint.ready(self.ep)

    cdef int arm(self) except -1:
        AmEndpoint.arm_timer(self.ep)
        return 0


async def _spin(AmEndpoint ep, node, pred, spin_s):
    cdef _AmSpin s = _AmSpin.__new__(_AmSpin)
    init_spin(s, node, <Events> ep.events)
    s.ep = ep
    s.pred = pred
    await spin(s, node, spin_s)


@cython.binding(True)
async def am_store_async(am, dest, local_buf, remote_addr, nbytes, handler, arg=0, on_done=None, done_arg=None):
    """Start an asynchronous store; the coroutine returns its `Transfer`.

    `AM.am_store_async` itself (a method of `libdp.am.AM`, compiled): a pipelined sweep
    makes one of these per transfer, so no interpreted frame forwards to it, and the
    store is built (`Bulk.store`) and run (`call`, inlined) by C calls."""
    cdef AmEndpoint ep = am.ep
    if ep.closed or ep._handler_depth:
        ep.check_caller("am_store_async")
    x = ep.new_store(dest, local_buf, nbytes, remote_addr, handler, arg, on_done, done_arg, False)
    # The process's node (`dp._node`) is its endpoint's, a C field: `am.dp._node` was two
    # attribute lookups per transfer, and `dp` is needed only when the call has to wait.
    node = ep.node
    since = None
    while True:
        try:
            r = await run_path(node, AmEndpoint.transfer_path(ep, x, since, False))
        except WouldBlock:
            r = BLOCKED
        if r is not BLOCKED:
            return x
        dp = am.dp
        since = node.engine.now if node.modeled else dp.now()     # `dp.now()`, less its frame
        if not AmEndpoint.ready(ep):
            AmEndpoint.arm_timer(ep)
            await wait_on(node, ep.events, dp.spin_s)


async def get(ep, dp, dest, remote_addr, local_buf, nbytes, handler, arg):
    """`AM.am_get`: start the get and run its call."""
    ep.check_caller("am_get")
    x = ep.get(dest, remote_addr, local_buf, nbytes, handler, arg)
    await call(ep, dp, _TRANSFER, x)
    return x
