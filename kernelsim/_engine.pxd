# The discrete-event core: a binary heap of (time, priority, sequence) keys in C,
# callbacks kept in a slot table so that no Python tuple is built per event.
cimport cython
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC


cdef inline double wall_now() noexcept nogil:
    # Real time's clock: time.perf_counter's (CLOCK_MONOTONIC on Linux), read without a
    # Python call or float -- a real-time engine reads it per event, a node per pass.
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9

cdef struct _Key:
    double time
    int prio
    long long seq
    int slot


cdef class EventTarget:
    """What a Cython model schedules on: `on_event(what, arg)` is a C call, not a Python one."""
    cdef int on_event(self, int what, object arg) except -1


# Final: nothing subclasses the engine, so its cdef methods are direct C calls (gcc may
# inline the heap's) and its cpdef ones skip the check for a Python override.
@cython.final
cdef class Engine:
    cdef public double now
    cdef _Key* _heap
    cdef Py_ssize_t _size
    cdef Py_ssize_t _cap
    cdef list _fns
    cdef list _args
    cdef int* _whats            # per slot: >= 0 for an EventTarget, -1 for a Python callable
    cdef int* _gen
    cdef int* _free
    cdef Py_ssize_t _nfree
    cdef Py_ssize_t _nslots
    cdef long long _seq
    cdef public bint stop_requested
    cdef public long long stops
    cdef public bint realtime
    cdef public long long events_run
    # Look-ahead (see `advance`): the bound of the running loop, and whether the code
    # running now may move time itself.
    cdef double _until
    cdef bint _look
    cdef readonly long long advances

    cpdef long long at(self, double time, object fn, object arg=*, int prio=*) except -1
    cpdef long long after(self, double delay, object fn, object arg=*, int prio=*) except -1
    cdef long long post(self, double time, EventTarget target, int what, object arg) except -1
    cdef long long _push(self, double time, object fn, int what, object arg, int prio) except -1
    cpdef bint cancel(self, long long handle)
    cpdef double peek(self) noexcept
    cpdef bint step(self) except -1
    cdef bint _step(self) except -1
    cdef bint _live_top(self) noexcept
    cdef bint _due(self, double until) noexcept
    cdef int _run_top(self) except -1
    cpdef long long run(self, double until=*) except -1
    cpdef long long run_until_stop(self, double until) except -1
    cpdef bint advance(self, double t) except -1
    cpdef open_window(self, double until)
    cpdef close_window(self)
    cpdef request_stop(self)
    cdef int _grow_slots(self) except -1
    # The heap's own C work cannot raise: noexcept, so no PyErr_Occurred after each call
    # (Cython's default for a void function; about 60 per message before).
    cdef void _pop_dead(self) noexcept
    cdef void _release(self, int slot) noexcept
    cdef void _sift_up(self, Py_ssize_t i) noexcept
    cdef void _sift_down(self, Py_ssize_t i) noexcept


cdef inline int try_advance(Engine e, double t) except -1:
    """Move `e.now` to `t` if nothing can happen before it (see `_engine.pyx`'s essay), in
    the caller: a refusal for the window's own reasons, and a yes when the heap's top key
    (live or cancelled, the earliest of all) comes after `t`; a key at or before `t` looks
    for the live one (a cancelled one is dropped). The CPU asks this per segment, the cards per event they fold (~30 per round trip).
    `Engine.advance` is this, for Python."""
    if not e._look or e.stop_requested or t > e._until or t < e.now:
        return 0
    # The top key is the earliest of all, live or cancelled: past `t`, no live event comes
    # first, without a call to find the live one (most asks end here).
    if e._size and e._heap[0].time <= t and e._live_top() and e._heap[0].time <= t:
        return 0
    e.now = t
    e.advances += 1
    return 1
