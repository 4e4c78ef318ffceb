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
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from types import MethodType as _MethodType

from kernelsim import WouldBlock, run_path, wait_on
from kernelsim._cpu cimport Cpu
from kernelsim._node cimport Node
from kernelsim._pyiter cimport take_raised
from kernelsim._trio cimport path_call
from kernelsim._spin cimport EngineSpin, init_spin
from kernelsim._spin import spin
from protocols.am.window import BLOCKED
from protocols.am.window cimport Events
from protocols.am.endpoint cimport AmEndpoint
from protocols.am._codes cimport K_REQ
from protocols.am._wire cimport Msg, new_msg

__all__ = ["call", "poll_until", "store_async", "get", "REQUEST", "TRANSFER", "WAIT", "CLOSE"]

cdef enum:
    _REQUEST = 0     # ep.request_path(peer, msg, since)
    _TRANSFER = 1    # ep.transfer_path(transfer, since, wait)
    _WAIT = 2        # ep.wait_path(pred, since)
    _CLOSE = 3       # ep.close_path(since)

REQUEST, TRANSFER, WAIT, CLOSE = _REQUEST, _TRANSFER, _WAIT, _CLOSE


cdef inline object _steal(PyObject* ref):
    """The object of a new reference (`path_call`'s ``rest``), the reference handed over."""
    o = <object> ref
    Py_XDECREF(ref)
    return o


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
    cdef PyObject* rest
    while True:
        try:
            # `await run_path(...)`, without its coroutine where the path ends at once
            r = path_call(<Node?> node, _path(ep, what, a, b, wait, since), &rest)
            if rest != NULL:
                r = await _steal(rest)
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
    if ep.closed or ep._handler_depth:     # (the good case told in C: a Python method call less)
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

cdef enum:
    _SPIN_RUN = 0       # `EngineSpin._defer`'s ``what`` that submits the next path (kernelsim._spin)
    _SPIN_GO_ON = 1     # ... and the one that goes on after a poll said "not yet"
    _LEVEL_PROC = 1     # kernelsim.LEVEL_PROC
#
# A program's ``while (!flag) am_poll();`` in modeled time is an `EngineSpin` (see
# kernelsim/_spin.pyx): the engine runs its polls at the instants the task would have,
# the task parked once for the whole loop.

cdef class _AmLoop(EngineSpin):
    """An engine-run loop of an SP AM endpoint's polls: what `_AmSpin` and `_Rounds` share
    (a poll that found nothing blocks; the endpoint says when a poll is due, and arms it)."""
    cdef AmEndpoint ep
    cdef bint inside        # running the loop's next step from `complete`: a next one is deferred

    cdef bint ends(self, object value) except -1:
        return value is not BLOCKED

    cdef bint ready(self) except -1:
        return AmEndpoint.ready(self.ep)

    cdef int arm(self) except -1:
        AmEndpoint.arm_timer(self.ep)
        return 0


@cython.final
cdef class _AmSpin(_AmLoop):
    """One `poll_until` of an SP AM endpoint: each poll is its ``wait_path``."""
    cdef object pred

    cdef object poll_path(self, object since):
        return AmEndpoint.wait_path(self.ep, self.pred, since)

    cdef int complete(self, object value, object exc) except -1:
        # A poll that found nothing ("not yet") defers what the task does next -- poll again,
        # or wait with the endpoint's timer armed -- to an event at this instant ahead of
        # every other (`EngineSpin.go_on`). Alone at this instant, that event is the next
        # thing the engine runs: it is run now, as the last thing of the event that ended
        # the poll (one engine event less per poll, in the sweep's receiver once a transfer).
        if self.over or exc is not None or value is not BLOCKED or self.inside or not _alone(self):
            return EngineSpin.complete(self, value, exc)
        self.since = self.engine.now
        self.inside = True
        self.go_on(_SPIN_GO_ON)
        self.inside = False
        return 0


cdef inline bint _alone(_AmLoop s) noexcept:
    """Nothing else is left at this instant -- no woken task, no other path on the CPU, no
    event due now -- so a spin's deferred event (priority -1, at this instant) would run
    next: what it does may be done now instead."""
    cdef Cpu cpu = s.cpu
    return not (s.engine.stop_requested or cpu._running is not None or cpu._irq.head is not None
                or cpu._proc.head is not None or s.engine.peek() <= s.engine.now)


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
    cdef PyObject* rest
    x = _store_start(am, dest, local_buf, remote_addr, nbytes, handler, arg, on_done, done_arg, &rest)
    if rest != NULL:
        await _steal(rest)
    return x


cdef object _store_start(am, dest, local_buf, remote_addr, nbytes, handler, arg, on_done, done_arg,
                         PyObject** rest):
    """`am_store_async` up to its first need of trio: its Transfer, with ``rest[0]`` NULL
    where the store's path ran to its end at once (the usual case), else a new reference
    to the coroutine that finishes the call (`store_rounds` calls this by C: no coroutine
    per transfer)."""
    cdef AmEndpoint ep = am.ep
    cdef PyObject* later = NULL
    rest[0] = NULL
    if ep.closed or ep._handler_depth:
        ep.check_caller("am_store_async")
    x = ep.new_store(dest, local_buf, nbytes, remote_addr, handler, arg, on_done, done_arg, False)
    # The process's node (`dp._node`) is its endpoint's, a C field: `am.dp._node` was two
    # attribute lookups per transfer, and `dp` is needed only when the call has to wait.
    node = ep.node
    try:
        r = path_call(<Node?> node, AmEndpoint.transfer_path(ep, x, None, False), &later)
    except WouldBlock:
        r = BLOCKED
    if later == NULL and r is not BLOCKED:
        return x
    going = _store_rest(am, ep, x, node, _steal(later) if later != NULL else None, r)
    Py_INCREF(going)
    rest[0] = <PyObject*> going
    return x


async def _store_rest(am, AmEndpoint ep, x, node, first, r):
    """The rest of `am_store_async` after `_store_start`: the first try's own rest (`first`),
    then, while the store is blocked, a spin and the next try."""
    cdef PyObject* rest
    if first is not None:
        try:
            r = await first
        except WouldBlock:
            r = BLOCKED
    while r is BLOCKED:
        dp = am.dp
        since = node.engine.now if node.modeled else dp.now()     # `dp.now()`, less its frame
        if not AmEndpoint.ready(ep):
            AmEndpoint.arm_timer(ep)
            await wait_on(node, ep.events, dp.spin_s)
        try:
            r = path_call(<Node?> node, AmEndpoint.transfer_path(ep, x, since, False), &rest)
            if rest != NULL:
                r = await _steal(rest)
        except WouldBlock:
            r = BLOCKED


async def get(ep, dp, dest, remote_addr, local_buf, nbytes, handler, arg):
    """`AM.am_get`: start the get and run its call."""
    ep.check_caller("am_get")
    x = ep.get(dest, remote_addr, local_buf, nbytes, handler, arg)
    await call(ep, dp, _TRANSFER, x)
    return x


# -- the AM ping-pong benchmark's loops (`libdp._am_bench`), compiled -----------------------
#
# As `libdp._calls.pingpong_rounds` is for DP: the same calls, in the same order, as the
# benchmark's Python loop made -- without its bytecode, a closure per round trip for the
# poll's predicate, and an interpreted frame per handler run and per predicate test. An
# `AM` whose am_request and poll_until are not overridden is called by C; any other `am`
# the Python way.

cdef object _AM_REQUEST = None
cdef object _AM_POLL_UNTIL = None


cdef bint _plain_am(am) except -1:
    global _AM_REQUEST, _AM_POLL_UNTIL
    if _AM_REQUEST is None:
        from libdp.am import AM         # (libdp.am imports this module)
        _AM_REQUEST, _AM_POLL_UNTIL = AM.am_request, AM.poll_until
    cls = type(am)
    return getattr(cls, "am_request", None) is _AM_REQUEST and getattr(cls, "poll_until", None) is _AM_POLL_UNTIL


def pingpong_handlers(int h_pong, list got):
    """The ping-pong's two handlers: ``ping`` replies `h_pong` with the words it got,
    ``pong`` counts a reply in ``got[0]``."""
    def ping(tok, *args):
        tok.reply(h_pong, *args)

    def pong(tok, *args):
        got[0] += 1

    return ping, pong


async def request_rounds(am, dp, peer, int h_ping, tuple args, Py_ssize_t warmup, Py_ssize_t total, list got):
    """Rank 0's `total` round trips: each an ``am_request`` of `h_ping` with `args`, then a
    poll until its reply is counted in ``got[0]``; returns ``dp.now()`` when the round
    trip numbered `warmup` began."""
    cdef Py_ssize_t i
    cdef bint plain = _plain_am(am)
    cdef AmEndpoint ep
    cdef _Above replied = _Above.__new__(_Above)
    cdef _Rounds s
    replied.got = got
    replied.want = 0
    t0 = dp.now()
    for i in range(total):
        if i == warmup:
            t0 = dp.now()
        replied.want = i
        if not plain:
            await am.am_request(peer, h_ping, *args)
            await am.poll_until(replied)
            continue
        # `AM.am_request` and `AM.poll_until`, as they are
        ep = am.ep
        if ep.closed or ep._handler_depth:
            ep.check_caller(f"am_request_{len(args)}")
        to, msg = ep.request_msg(peer, h_ping, args)
        await call(ep, am.dp, _REQUEST, to, msg)
        node = am.dp._node
        if not isinstance(node, Node) or not (<Node> node).modeled:
            await poll_until(ep, am.dp, replied)
            continue
        # Modeled time: poll_until's first checks, then its spin -- which runs every round
        # trip left, the task parked once for them all (`_Rounds`).
        if ep.closed or ep._handler_depth:
            ep.check_caller("am_poll")
        if replied():
            continue
        s = _Rounds.__new__(_Rounds)
        init_spin(s, node, <Events> ep.events)
        s.ep, s.peer, s.pred, s.t0 = ep, to, replied, t0
        s.handler, s.data = (<Msg> msg).handler, (<Msg> msg).data
        s.what = f"am_request_{len(args)}"
        s.i, s.warmup, s.total = i, warmup, total
        s.waiting = True
        await spin(s, node, am.dp.spin_s)
        return s.t0
    return t0


@cython.final
cdef class _Above:
    """``got[0] > want``: whether round trip `want`'s reply is in (the poll's predicate, a
    C object: tested at every poll without an interpreted frame)."""
    cdef list got
    cdef Py_ssize_t want

    def __call__(self):
        return self.got[0] > self.want




@cython.final
cdef class _Rounds(_AmLoop):
    """The round trips of `request_rounds` left after its first request, in modeled time: one
    poll loop the engine runs (see kernelsim._spin), the task parked once for all of them.

    As a task, each round trip parked and woke it (a pass of trio's run loop, four
    coroutines and a spin made and freed per round trip); its code between two calls --
    the time read at round `warmup`, the next request built, poll_until's checks -- does
    nothing modeled, and its calls are paths submitted at the instant the last one ended,
    before any other event of that instant. Here the same paths are submitted at the same
    instants, the same checks made in the same order: each round trip's request
    (``request_path``, continued after a full window as `call` does), then, unless its
    reply is in already, a poll until it is (``wait_path``, as `poll_until`'s spin)."""
    cdef object peer, t0, data
    cdef _Above pred
    cdef Msg msg
    cdef int handler
    cdef str what
    cdef Py_ssize_t i, warmup, total
    cdef bint waiting       # on the poll for round `i`'s reply (else its request)

    cdef object poll_path(self, object since):
        if self.waiting:
            return AmEndpoint.wait_path(self.ep, self.pred, since)
        return AmEndpoint.request_path(self.ep, self.peer, self.msg, since)

    cdef int complete(self, object value, object exc) except -1:
        cdef int r
        if self.over or exc is not None or value is BLOCKED:
            return EngineSpin.complete(self, value, exc)
        r = _go_on_unchecked(self)
        if r == -1:
            return EngineSpin.complete(self, None, take_raised())
        if r == 0:
            return EngineSpin.complete(self, value, None)         # the last round trip is over
        return 0


cdef int _go_on(_Rounds s) except -1:
    """What the task does once a call has returned: 1 when it has started the next call,
    0 when the round trips are over."""
    cdef AmEndpoint ep = s.ep
    cdef Cpu cpu
    if s.waiting:
        s.waiting = False                   # the poll ended: the reply is in
    else:
        # the request went: `poll_until(replied)`, which looks before it polls
        if ep.closed or ep._handler_depth:
            ep.check_caller("am_poll")
        s.waiting = not s.pred()
    if not s.waiting:
        s.i += 1
        if s.i >= s.total:
            return 0
        if s.i == s.warmup:
            s.t0 = s.engine.now                                    # `dp.now()`
        s.pred.want = s.i
        if ep.closed or ep._handler_depth:
            ep.check_caller(s.what)
        # `ep.request_msg(peer, h_ping, args)`: the same peer, handler and words every time
        s.msg = new_msg(K_REQ, 0, s.handler, s.data, 1, 0, 0, 0, 0, None, False)
    cpu = s.cpu
    if s.inside or not _alone(s):
        # Not alone at this instant (a woken task, another path, another event): as the task
        # would, after them.
        s.since = None
        s._defer(_SPIN_RUN)
        return 1
    # The path is submitted now, as the last thing of the event that ended the last one: the
    # event a deferred submission would be runs next anyway (nothing else is due before it).
    s.inside = True
    cpu.submit(_LEVEL_PROC, s.poll_path(None), s)
    s.inside = False
    return 1


# `complete` calls `_go_on` through a pointer that does not declare it can fail, and takes
# the error itself (`take_raised`): it goes to the task, as a check the task made would.
ctypedef int (*_GoOnFn)(_Rounds) noexcept
cdef _GoOnFn _go_on_unchecked = <_GoOnFn> _go_on


async def serve_rounds(am, Py_ssize_t total):
    """Rank 1: poll until `total` more handlers have run on the endpoint."""
    ep = am.ep
    start = ep.handlers_run

    def served():
        return ep.handlers_run - start >= total

    if _plain_am(am):
        await poll_until(ep, am.dp, served)
    else:
        await am.poll_until(served)


# -- the AM bandwidth sweep's store loop (`libdp._am_bench._bw_size`), compiled ------------
#
# The 1 MB sweep is mostly 16- to 128-byte stores: per store, the loop's bytecode and an
# interpreted frame for the completion callback and for the data handler cost about as
# much as a tenth of the modeled transfer. The same calls, in the same order.

@cython.final
cdef class _AtLeast:
    """``lambda: state[key] >= floor``, a poll's predicate, as a C object: the sweep's
    receiving side tests it at every poll (once per transfer), without an interpreted
    frame each time."""
    cdef dict state
    cdef object key, floor

    def __call__(self):
        return self.state[self.key] >= self.floor


def at_least(dict state, key, floor):
    """A predicate for `poll_until`: whether ``state[key] >= floor``."""
    cdef _AtLeast p = _AtLeast.__new__(_AtLeast)
    p.state, p.key, p.floor = state, key, floor
    return p


def bw_handlers(dict state):
    """The sweep's data handler (counts ``state["arrived"]``) and store-completion callback
    (counts ``state["done"]``)."""
    def data(tok, addr, nbytes, arg):
        state["arrived"] += 1

    def completed(_arg):
        state["done"] += 1

    return data, completed


async def store_rounds(store_async, store, dest, base, remote, Py_ssize_t n, Py_ssize_t count, Py_ssize_t total,
                       bint is_async, int h_data, completed, dict state):
    """`count` stores of `n` bytes from ``base + i * n`` to ``remote + i * n`` (the last one
    cut at `total`), each with handler `h_data` and argument `i`: ``store_async(...,
    completed)`` when `is_async`, else a blocking ``store`` counted in ``state["done"]``."""
    cdef Py_ssize_t i, off, m
    cdef PyObject* rest
    # `store_async` a plain AM's own (the compiled `am_store_async`, bound): started by C
    am = None
    if is_async and type(store_async) is _MethodType and getattr(store_async, "__func__", None) is am_store_async:
        am = store_async.__self__
    for i in range(count):
        off = i * n                          # (i * n) % total: i < count <= ceil(total / n)
        m = n if off + n <= total else total - off
        if am is not None:
            _store_start(am, dest, base + off, remote + off, m, h_data, i, completed, None, &rest)
            if rest != NULL:
                await _steal(rest)
        elif is_async:
            await store_async(dest, base + off, remote + off, m, h_data, i, completed)
        else:
            await store(dest, base + off, remote + off, m, h_data, i)
            state["done"] += 1
