# A program's poll loop run by the engine itself (_spin.pyx).
from kernelsim._cpu cimport Completion, Cpu
from kernelsim._engine cimport Engine, EventTarget
from kernelsim._waits cimport SpinnerQueue, WaitQueue


cdef class _Later(EventTarget):
    cdef EngineSpin spin


cdef class EngineSpin(Completion):
    # What a protocol's poll loop is made of: a subclass says how one poll's path is made
    # (`poll_path`), whether a value ends the loop (`ends`), and whether the next poll
    # would find work (`ready`) -- arming what wakes the queue in time if not (`arm`).
    cdef Cpu cpu
    cdef Engine engine
    cdef SpinnerQueue queue
    cdef object since, exc
    cdef WaitQueue finished
    cdef _Later later
    cdef long long event
    cdef bint over

    cdef object poll_path(self, object since)
    cdef bint ends(self, object value) except -1
    cdef bint ready(self) except -1
    cdef int arm(self) except -1

    cdef int start(self) except -1
    cdef int _defer(self, int what) except -1
    cdef int go_on(self, int what) except -1
    cdef int abandon(self) except -1


cdef class CallableSpin(EngineSpin):
    cdef object make_path, done, is_ready, arm_timer


cdef int init_spin(EngineSpin spin, node, SpinnerQueue queue) except -1
