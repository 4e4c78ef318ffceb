# cython: language_level=3
"""Poll loops the engine runs (modeled time).

A program's ``while (!done) poll();`` is, in the model, one poll path on its CPU, then
(nothing yet) a spin -- a wait on the protocol's events -- until something arrives, then
the continuation path, and so on. Run by the task, each arrival parked and woke it: two
task switches and a pass of trio's run loop per packet, as many as the modeled work of
the poll itself. An `EngineSpin` runs the same paths at the same instants with the task
parked once for the whole loop: the events wake it by a C call (`SpinnerQueue.spinner`),
and what the task would have done once trio ran it -- submit the next poll, or look
whether it would find work (`ready`) and arm the protocol's timer -- it does in an
engine event at the same instant, ahead of every other event of that instant (priority
-1: nothing else in the model uses a priority). That is where the task's own work fell:
a wake stopped the engine after the event that woke, and trio ran the task before the
engine went on. A poll loop that ends wakes the task (its queue `finished`).

SP AM's am_poll loop (``libdp/_am_call.pyx``) and LCI's ``poll_until`` (`CallableSpin`)
are such loops. In real time a program's loop stays a loop of its task.
"""
cimport cython
from kernelsim._node cimport Node
from kernelsim._pyiter cimport take_raised
from kernelsim._trio import wait_on

__all__ = ["CallableSpin", "callable_spin", "spin"]

cdef enum:
    _RUN = 0        # submit the poll's path (the events woke)
    _GO_ON = 1      # the path said "not yet": poll again at once if work is there, else wait
    _FIRST_PRIO = -1
    _PROC = 1       # kernelsim.LEVEL_PROC: the caller's poll runs at process level


@cython.final
cdef class _Later(EventTarget):
    """The engine event that continues a spin (a Completion cannot be an EventTarget too)."""

    cdef int on_event(self, int what, object arg) except -1:
        return self.spin.go_on(what)


cdef class EngineSpin(Completion):
    """One poll loop in modeled time, run by the engine (see above). Built by a subclass's
    factory, then `init_spin`; run by `spin`."""

    cdef object poll_path(self, object since):
        raise NotImplementedError

    cdef bint ends(self, object value) except -1:
        raise NotImplementedError

    cdef bint ready(self) except -1:
        raise NotImplementedError

    cdef int arm(self) except -1:
        raise NotImplementedError

    cdef int start(self) except -1:
        """The first poll, submitted by the calling task (as `run_path` did)."""
        self.cpu.submit(_PROC, self.poll_path(None), self)
        return 0

    cdef int wake_up(self) except -1:
        # The protocol's events: something arrived, room to send, a timer due.
        return self._defer(_RUN)

    cdef int complete(self, object value, object exc) except -1:
        cdef bint ends = False
        cdef int r
        if self.over:
            return 0                    # abandoned (the task was cancelled)
        if exc is None:
            r = _ends_unchecked(self, value)
            if r == -1:
                exc = take_raised()     # the program's predicate raised: its error
            ends = r == 1
        if exc is not None or ends:
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
        if _poll_unchecked(self, what) == -1:
            # The polling task's error, not the engine's: raised where the task awaits,
            # as it was when the task ran this itself.
            self.complete(None, take_raised())
        return 0

    cdef int abandon(self) except -1:
        self.over = True
        if self.event >= 0:
            self.engine.cancel(self.event)
            self.event = -1
        self.queue.discard_spinner(self)
        return 0


cdef int _poll(EngineSpin s, int what) except -1:
    """What the task would do next: poll again -- at once if it would find work, else once
    the queue wakes it (the protocol's timer armed)."""
    if what == _GO_ON and not s.ready():
        s.arm()
        s.queue.add_spinner(s)
        return 0
    s.cpu.submit(_PROC, s.poll_path(s.since), s)
    return 0


cdef int _ends(EngineSpin s, object value) except -1:
    return s.ends(value)


# Called through pointers that do not declare they can fail, their -1 looked at by the
# caller (`take_raised`): a `try` block per poll would cost more than the poll's own C.
ctypedef int (*_SpinFn)(EngineSpin, int) noexcept
ctypedef int (*_EndsFn)(EngineSpin, object) noexcept
cdef _SpinFn _poll_unchecked = <_SpinFn> _poll
cdef _EndsFn _ends_unchecked = <_EndsFn> _ends


@cython.final
cdef class CallableSpin(EngineSpin):
    """A spin made of callables: ``make_path(since)`` (None the first time) is one poll's
    path, and ``done()``, asked the moment it ends, ends the loop when true; ``is_ready()``
    and ``arm_timer()`` as above."""

    cdef object poll_path(self, object since):
        return self.make_path(since)

    cdef bint ends(self, object value) except -1:
        return bool(self.done())

    cdef bint ready(self) except -1:
        return bool(self.is_ready())

    cdef int arm(self) except -1:
        self.arm_timer()
        return 0


def callable_spin(node, SpinnerQueue queue, make_path, done, is_ready, arm_timer) -> CallableSpin:
    """A `CallableSpin` on `node` woken by `queue` (run it with `spin`)."""
    cdef CallableSpin s = CallableSpin.__new__(CallableSpin)
    init_spin(s, node, queue)
    s.make_path = make_path
    s.done = done
    s.is_ready = is_ready
    s.arm_timer = arm_timer
    return s


cdef int init_spin(EngineSpin spin, node, SpinnerQueue queue) except -1:
    if isinstance(node, Node):          # (its fields by C reads, not by name: one spin per poll loop)
        spin.cpu = (<Node> node).cpu
        spin.engine = (<Node> node).engine
    else:
        spin.cpu = node.cpu
        spin.engine = node.engine
    spin.queue = queue
    spin.event = -1
    spin.finished = WaitQueue(spin.engine)
    spin.later = _Later.__new__(_Later)
    spin.later.spin = spin
    return 0


async def spin(EngineSpin s, node, spin_s):
    """Run the poll loop `s` to its end, the calling task parked meanwhile; its error, if any."""
    s.start()
    try:
        if not s.over:
            await wait_on(node, s.finished, spin_s)
    finally:
        if not s.over:
            s.abandon()
        s.later.spin = None             # the cycle, broken
    if s.exc is not None:
        raise s.exc
