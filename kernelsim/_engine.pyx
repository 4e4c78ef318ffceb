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
"""
from libc.stdlib cimport malloc, realloc, free
from libc.math cimport INFINITY
from time import perf_counter as _wall

cdef inline bint _less(_Key* a, _Key* b):
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
        self._free = NULL
        self._nfree = 0
        self._fns = []
        self._args = []
        if self._heap == NULL:
            raise MemoryError()
        self._grow_slots()

    def __init__(self, bint realtime=False):
        self.realtime = realtime
        self.now = _wall() if realtime else 0.0
        self._size = 0
        self._seq = 0
        self.stop_requested = False
        self.stops = 0
        self.events_run = 0

    def __dealloc__(self):
        free(self._heap)
        free(self._gen)
        free(self._free)

    cdef int _grow_slots(self) except -1:
        cdef Py_ssize_t old = self._nslots, new = old * 2 if old else 256, i
        cdef int* g = <int*> realloc(self._gen, new * sizeof(int))
        if g == NULL:
            raise MemoryError()
        self._gen = g
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
        self._fns[slot] = fn
        self._args[slot] = arg
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

    cpdef long long after(self, double delay, object fn, object arg=None, int prio=0) except -1:
        return self.at(self.now + delay, fn, arg, prio)

    cpdef bint cancel(self, long long handle):
        """Cancel a pending event; False if it already ran, was cancelled or never was."""
        if handle < 0:
            return False
        cdef long long slot = handle & 0xffffffffLL
        cdef long long gen = handle >> 32
        if slot >= self._nslots or self._gen[slot] != gen or self._fns[slot] is None:
            return False
        # Lazy deletion: the heap key stays, the slot is marked dead.
        self._fns[slot] = None
        self._args[slot] = None
        return True

    cpdef double peek(self):
        """Time of the next live event, or +inf."""
        cdef int slot
        while self._size:
            slot = self._heap[0].slot
            if self._fns[slot] is not None:
                return self._heap[0].time
            self._pop_dead()
        return INFINITY

    cdef void _pop_dead(self):
        cdef int slot = self._heap[0].slot
        self._release(slot)
        self._size -= 1
        if self._size:
            self._heap[0] = self._heap[self._size]
            self._sift_down(0)

    cdef void _release(self, int slot):
        self._gen[slot] = (self._gen[slot] + 1) & 0x7fffffff
        self._free[self._nfree] = slot
        self._nfree += 1

    cpdef bint step(self) except -1:
        """Run the next live event. False when there is none."""
        cdef int slot
        cdef object fn, arg
        while self._size:
            slot = self._heap[0].slot
            fn = self._fns[slot]
            if fn is None:
                self._pop_dead()
                continue
            self.now = _wall() if self.realtime else self._heap[0].time
            arg = self._args[slot]
            self._fns[slot] = None
            self._args[slot] = None
            self._pop_dead()
            self.events_run += 1
            fn(arg)
            return True
        return False

    cpdef long long run(self, double until=INFINITY) except -1:
        """Run every event up to and including time `until`; return how many ran."""
        cdef long long n = 0
        cdef double t
        while True:
            t = self.peek()
            if t == INFINITY or t > until:
                break
            self.step()
            n += 1
        if until != INFINITY and until > self.now:
            self.now = until
        return n

    cpdef long long run_until_stop(self, double until) except -1:
        """Run events with time <= `until` until one of them calls `request_stop()`."""
        cdef long long n = 0
        cdef double t
        self.stop_requested = False
        while not self.stop_requested:
            t = self.peek()
            if t == INFINITY or t > until:
                break
            self.step()
            n += 1
        return n

    def request_stop(self):
        """Ask the running `run_until_stop` to return after this event (something woke)."""
        self.stop_requested = True
        self.stops += 1

    def __len__(self):
        cdef Py_ssize_t i, live = 0
        for i in range(self._size):
            if self._fns[self._heap[i].slot] is not None:
                live += 1
        return live

    def stats(self):
        return {"now_s": self.now, "events_run": self.events_run, "pending": len(self)}

    cdef void _sift_up(self, Py_ssize_t i):
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

    cdef void _sift_down(self, Py_ssize_t i):
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
