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
from kernelsim._cpu cimport Completion, Cpu
from kernelsim._engine cimport Engine, EventTarget
from kernelsim._waits cimport WaitQueue
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
        return ep.request_path(a, b, since)
    if what == _TRANSFER:
        return ep.transfer_path(a, since, wait)
    if what == _WAIT:
        return ep.wait_path(a, since)
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
        if not ep.ready():
            ep.arm_timer()
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
            r = await run_path(node, ep.wait_path(pred, since))
        except WouldBlock:
            r = BLOCKED
        if r is not BLOCKED:
            return
        since = dp.now()
        if not ep.ready():
            ep.arm_timer()
            await wait_on(node, ep.events, dp.spin_s)


# -- am_poll loops the engine runs (modeled time) --------------------------------------------
#
# A program's ``while (!flag) am_poll();`` is, in the model, one poll path on its CPU, then
# (nothing yet) a spin -- a wait on the endpoint's events -- until something arrives, then
# the continuation path, and so on. Run by the task, each arrival parked and woke it: two
# task switches and a pass of trio's run loop per packet, as many as the modeled work of
# the poll itself. `_Spin` runs the same paths at the same instants with the task parked
# once for the whole loop: the endpoint's events wake it by a C call (`Events.spinner`),
# and what the task would have done once trio ran it -- submit the continuation, or look
# whether the next poll would find work (`ready`) and arm the keep-alive -- it does in an
# engine event at the same instant, ahead of every other event of that instant
# (priority -1: nothing else in the model uses a priority). That is where the task's own
# work fell: a wake stopped the engine after the event that woke, and trio ran the task
# before the engine went on. A poll loop that ends wakes the task (its queue `finished`).

cdef enum:
    _RUN = 0        # submit the poll's path (the events woke)
    _GO_ON = 1      # the path said BLOCKED: poll again at once if work is there, else wait
    _FIRST_PRIO = -1
    _PROC = 1       # kernelsim.LEVEL_PROC: the caller's poll runs at process level


@cython.final
cdef class _Later(EventTarget):
    """The engine event that continues a `_Spin` (a Completion cannot be an EventTarget too)."""
    cdef _Spin spin

    cdef int on_event(self, int what, object arg) except -1:
        return self.spin.go_on(what)


@cython.final
cdef class _Spin(Completion):
    """One `poll_until` in modeled time, run by the engine (see above)."""
    cdef AmEndpoint ep
    cdef Cpu cpu
    cdef Engine engine
    cdef object pred, since, exc
    cdef WaitQueue finished
    cdef _Later later
    cdef long long event
    cdef bint over

    cdef int start(self) except -1:
        """The first poll, submitted by the calling task (as `run_path` did)."""
        self.cpu.submit(_PROC, self.ep.wait_path(self.pred, None), self)
        return 0

    cdef int wake_up(self) except -1:
        # The endpoint's events: something arrived, send-FIFO room, a keep-alive due.
        return self._defer(_RUN)

    cdef int complete(self, object value, object exc) except -1:
        if self.over:
            return 0                    # abandoned (the task was cancelled)
        if exc is not None or value is not BLOCKED:
            self.exc = exc
            self.over = True
            self.finished.wake()
            return 0
        self.since = self.engine.now
        return self._defer(_GO_ON)

    cdef int _defer(self, int what) except -1:
        self.event = self.engine._push(self.engine.now, self.later, what, None, _FIRST_PRIO)
        return 0

    cdef int go_on(self, int what) except -1:
        self.event = -1
        if self.over:
            return 0
        try:
            if what == _GO_ON and not self.ep.ready():
                self.ep.arm_timer()
                (<Events> self.ep.events).add_spinner(self)
                return 0
            self.cpu.submit(_PROC, self.ep.wait_path(self.pred, self.since), self)
        except BaseException as e:
            # The polling task's error, not the engine's: raised where the task awaits,
            # as it was when the task ran this itself.
            self.complete(None, e)
        return 0

    cdef int abandon(self) except -1:
        self.over = True
        if self.event >= 0:
            self.engine.cancel(self.event)
            self.event = -1
        (<Events> self.ep.events).discard_spinner(self)
        return 0


async def _spin(AmEndpoint ep, node, pred, spin_s):
    cdef _Spin spin = _Spin.__new__(_Spin)
    spin.ep = ep
    spin.cpu = <Cpu> node.cpu
    spin.engine = <Engine> node.engine
    spin.pred = pred
    spin.event = -1
    spin.finished = WaitQueue(spin.engine)
    spin.later = _Later.__new__(_Later)
    spin.later.spin = spin
    spin.start()
    try:
        if not spin.over:
            await wait_on(node, spin.finished, spin_s)
    finally:
        if not spin.over:
            spin.abandon()
        spin.later.spin = None          # the cycle, broken
    if spin.exc is not None:
        raise spin.exc


async def store_async(AmEndpoint ep, dp, dest, local_buf, remote_addr, nbytes, handler, arg, on_done, done_arg):
    """`AM.am_store_async`: start the store and run its call (`call` inlined: a pipelined
    sweep makes one of these per transfer)."""
    if ep.closed or ep._handler_depth:
        ep.check_caller("am_store_async")
    x = ep.store(dest, local_buf, nbytes, remote_addr, handler, arg, on_done, done_arg)
    node = dp._node
    since = None
    while True:
        try:
            r = await run_path(node, ep.transfer_path(x, since, False))
        except WouldBlock:
            r = BLOCKED
        if r is not BLOCKED:
            return x
        since = node.engine.now if node.modeled else dp.now()     # `dp.now()`, less its frame
        if not ep.ready():
            ep.arm_timer()
            await wait_on(node, ep.events, dp.spin_s)


async def get(ep, dp, dest, remote_addr, local_buf, nbytes, handler, arg):
    """`AM.am_get`: start the get and run its call."""
    ep.check_caller("am_get")
    x = ep.get(dest, remote_addr, local_buf, nbytes, handler, arg)
    await call(ep, dp, _TRANSFER, x)
    return x
