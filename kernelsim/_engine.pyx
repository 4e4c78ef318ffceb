# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The event engine.

A tiny, deterministic discrete-event core in the manner of SimPy: events are ordered
by (time, priority, sequence), so two runs with the same inputs run the same events
in the same order. Everything timed in the model -- a CPU finishing a kernel path, a
DMA burst, the last bit of a frame leaving the wire -- is one event here.

In real time the same engine serves as a run queue: `realtime` makes every event due
at once (delays are what the hardware takes, and in real time the hardware is this
host), and `now` follows the host's monotonic clock.

Handles returned by `at`/`after` encode (slot, generation) so a stale handle can never
cancel a later event that happens to reuse the slot.

Two things keep the per-event cost near a bare heap operation:

* **Typed targets.** A Cython model subclasses `EventTarget` and schedules with `post`
  (a C call); `on_event(what, arg)` runs it, with `what` saying which of its handlers.
  Python callables still work through `at`/`after`.
* **Look-ahead.** An event that only marks the end of some CPU time need not be an
  event at all when nothing else can happen before it: `advance(t)` moves `now` to `t`
  at once -- and returns True -- if no pending event comes at or before `t`, `t` is
  within the bound of the loop that runs the engine (trio's next deadline), and no one
  has asked the loop to stop (a stop means something outside the engine is about to
  look at this instant). What ran in between is then exactly what would have run, in
  the same order, at the same modeled times. Only the code that owns the current event
  may call it, as the last thing it does there (`Cpu` does, for a path's next
  segment); `open_window` grants the same to a caller that is about to run the engine
  itself from outside (a lone trio task, `_drive_inline`).
"""
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from libc.stdlib cimport malloc, realloc, free
from libc.math cimport INFINITY

cdef class EventTarget:
    cdef int on_event(self, int what, object arg) except -1:
        raise NotImplementedError


# The slot tables' items, reached through the list's C pointer: a table read from its
# field is then not a new reference (added and dropped around every use, several per event).
cdef extern from "Python.h":
    PyObject* _item "PyList_GET_ITEM"(PyObject* table, Py_ssize_t i)
    void _set_item "PyList_SET_ITEM"(PyObject* table, Py_ssize_t i, PyObject* value)


cdef inline void _put(PyObject* table, Py_ssize_t i, object value) noexcept:
    """``table[i] = value`` for a slot that exists: the slot tables are lists (so the
    collector sees what they hold) written several times per event, without the checks."""
    cdef PyObject* old = _item(table, i)
    Py_INCREF(value)
    _set_item(table, i, <PyObject*> value)
    Py_XDECREF(old)


cdef inline PyObject* _take(PyObject* table, Py_ssize_t i) noexcept:
    """Slot `i`'s reference, taken: the slot holds None (a new reference to it) instead."""
    cdef PyObject* held = _item(table, i)
    Py_INCREF(None)
    _set_item(table, i, <PyObject*> None)
    return held


cdef inline bint _empty(PyObject* table, Py_ssize_t i) noexcept:
    return _item(table, i) == <PyObject*> None


cdef inline bint _less(_Key* a, _Key* b) noexcept:
    if a.time != b.time:
        return a.time < b.time
    if a.prio != b.prio:
        return a.prio < b.prio
    return a.seq < b.seq


cdef class Engine:
    """Owns modeled time. `now` is in seconds."""

    def __cinit__(self):
        self._cap = 256
        self._heap = <_Key*> malloc(self._cap * sizeof(_Key))
        self._nslots = 0
        self._gen = NULL
        self._whats = NULL
        self._free = NULL
        self._nfree = 0
        self._fns = []
        self._args = []
        if self._heap == NULL:
            raise MemoryError()
        self._grow_slots()

    def __init__(self, bint realtime=False):
        self.realtime = realtime
        self.now = wall_now() if realtime else 0.0
        self._size = 0
        self._seq = 0
        self.stop_requested = False
        self.stops = 0
        self.events_run = 0
        self._until = -INFINITY
        self._look = False
        self.advances = 0

    def __dealloc__(self):
        free(self._heap)
        free(self._gen)
        free(self._whats)
        free(self._free)

    cdef int _grow_slots(self) except -1:
        cdef Py_ssize_t old = self._nslots, new = old * 2 if old else 256, i
        cdef int* g = <int*> realloc(self._gen, new * sizeof(int))
        if g == NULL:
            raise MemoryError()
        self._gen = g
        cdef int* w = <int*> realloc(self._whats, new * sizeof(int))
        if w == NULL:
            raise MemoryError()
        self._whats = w
        cdef int* f = <int*> realloc(self._free, new * sizeof(int))
        if f == NULL:
            raise MemoryError()
        self._free = f
        for i in range(old, new):
            self._gen[i] = 0
            self._fns.append(None)
            self._args.append(None)
        # Push in reverse so low slots are handed out first (deterministic, cache-friendly).
        for i in range(new - 1, old - 1, -1):
            self._free[self._nfree] = <int> i
            self._nfree += 1
        self._nslots = new
        return 0

    cpdef long long at(self, double time, object fn, object arg=None, int prio=0) except -1:
        """Run `fn(arg)` at absolute modeled `time` (never earlier than now)."""
        return self._push(time, fn, -1, arg, prio)

    cpdef long long after(self, double delay, object fn, object arg=None, int prio=0) except -1:
        return self._push(self.now + delay, fn, -1, arg, prio)

    cdef long long post(self, double time, EventTarget target, int what, object arg) except -1:
        """Run ``target.on_event(what, arg)`` at `time` (priority 0): the typed `at`."""
        return self._push(time, target, what, arg, 0)

    cdef long long _push(self, double time, object fn, int what, object arg, int prio) except -1:
        cdef int slot
        cdef _Key* grown
        if self.realtime:
            time = self.now
        elif time < self.now:
            time = self.now
        if self._nfree == 0:
            self._grow_slots()
        self._nfree -= 1
        slot = self._free[self._nfree]
        _put(<PyObject*> self._fns, slot, fn)
        _put(<PyObject*> self._args, slot, arg)
        self._whats[slot] = what
        if self._size == self._cap:
            grown = <_Key*> realloc(self._heap, self._cap * 2 * sizeof(_Key))
            if grown == NULL:
                raise MemoryError()
            self._heap = grown
            self._cap *= 2
        self._heap[self._size].time = time
        self._heap[self._size].prio = prio
        self._heap[self._size].seq = self._seq
        self._heap[self._size].slot = slot
        self._seq += 1
        self._size += 1
        self._sift_up(self._size - 1)
        return (<long long> self._gen[slot] << 32) | slot

    cpdef bint cancel(self, long long handle):
        """Cancel a pending event; False if it already ran, was cancelled or never was."""
        if handle < 0:
            return False
        cdef long long slot = handle & 0xffffffffLL
        cdef long long gen = handle >> 32
        if slot >= self._nslots or self._gen[slot] != gen or _empty(<PyObject*> self._fns, slot):
            return False
        # Lazy deletion: the heap key stays, the slot is marked dead.
        _put(<PyObject*> self._fns, slot, None)
        _put(<PyObject*> self._args, slot, None)
        return True

    cpdef double peek(self) noexcept:
        """Time of the next live event, or +inf."""
        return self._heap[0].time if self._live_top() else INFINITY

    cdef bint _live_top(self) noexcept:
        """Drop cancelled keys off the top of the heap: True if a live event is left there."""
        while self._size:
            if not _empty(<PyObject*> self._fns, self._heap[0].slot):
                return True
            self._pop_dead()
        return False

    cdef void _pop_dead(self) noexcept:
        cdef int slot = self._heap[0].slot
        self._release(slot)
        self._size -= 1
        if self._size:
            self._heap[0] = self._heap[self._size]
            self._sift_down(0)

    cdef void _release(self, int slot) noexcept:
        self._gen[slot] = (self._gen[slot] + 1) & 0x7fffffff
        self._free[self._nfree] = slot
        self._nfree += 1

    cpdef bint step(self) except -1:
        """Run the next live event. False when there is none."""
        cdef double saved = self._until
        self._until = INFINITY
        try:
            return self._step()
        finally:
            self._until = saved

    cdef bint _step(self) except -1:
        if not self._live_top():
            return False
        self._run_top()
        return True

    cdef bint _due(self, double until) noexcept:
        """A live event is next, and it comes at or before `until` (an event at +inf never does)."""
        return self._live_top() and self._heap[0].time <= until and self._heap[0].time != INFINITY

    cdef int _run_top(self) except -1:
        """Run the event on top of the heap, which `_live_top` has found live."""
        cdef int slot = self._heap[0].slot
        cdef int what = self._whats[slot]
        # The event takes the slot's references to its callback and argument (the slot
        # holds None again): no reference added here and dropped there, per event.
        cdef PyObject* fn = _take(<PyObject*> self._fns, slot)
        cdef PyObject* arg = _take(<PyObject*> self._args, slot)
        self.now = wall_now() if self.realtime else self._heap[0].time
        self._pop_dead()
        self.events_run += 1
        self._look = not self.realtime and not self.stop_requested
        try:
            if what >= 0:
                (<EventTarget> fn).on_event(what, <object> arg)
            else:
                (<object> fn)(<object> arg)
        finally:
            self._look = False
            Py_XDECREF(fn)
            Py_XDECREF(arg)
        return 0

    cpdef long long run(self, double until=INFINITY) except -1:
        """Run every event up to and including time `until`; return how many ran."""
        cdef long long n = 0
        cdef double saved = self._until
        self._until = until
        try:
            while self._due(until):
                self._run_top()
                n += 1
        finally:
            self._until = saved
        if until != INFINITY and until > self.now:
            self.now = until
        return n

    cpdef long long run_until_stop(self, double until) except -1:
        """Run events with time <= `until` until one of them calls `request_stop()`."""
        cdef long long n = 0
        cdef double saved = self._until
        self.stop_requested = False
        self._until = until
        try:
            while not self.stop_requested and self._due(until):
                self._run_top()
                n += 1
        finally:
            self._until = saved
        return n

    cpdef bint advance(self, double t) except -1:
        """Move `now` to `t` if nothing can happen before it (see the module's essay)."""
        return try_advance(self, t)

    cpdef open_window(self, double until):
        """The caller is about to run the engine up to `until` from outside: it may advance."""
        if not self.realtime:
            self.stop_requested = False
            self._until = until
            self._look = True

    cpdef close_window(self):
        self._until = -INFINITY
        self._look = False

    cpdef request_stop(self):
        """Ask the running `run_until_stop` to return after this event (something woke)."""
        self.stop_requested = True
        self.stops += 1
        self._look = False

    def __len__(self):
        cdef Py_ssize_t i, live = 0
        for i in range(self._size):
            if self._fns[self._heap[i].slot] is not None:
                live += 1
        return live

    def stats(self):
        return {"now_s": self.now, "events_run": self.events_run, "pending": len(self),
                "advances": self.advances}

    cdef void _sift_up(self, Py_ssize_t i) noexcept:
        cdef _Key item = self._heap[i]
        cdef Py_ssize_t parent
        while i > 0:
            parent = (i - 1) >> 1
            if _less(&item, &self._heap[parent]):
                self._heap[i] = self._heap[parent]
                i = parent
            else:
                break
        self._heap[i] = item

    cdef void _sift_down(self, Py_ssize_t i) noexcept:
        cdef _Key item = self._heap[i]
        cdef Py_ssize_t child, n = self._size
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            if child + 1 < n and _less(&self._heap[child + 1], &self._heap[child]):
                child += 1
            if _less(&self._heap[child], &item):
                self._heap[i] = self._heap[child]
                i = child
            else:
                break
        self._heap[i] = item
