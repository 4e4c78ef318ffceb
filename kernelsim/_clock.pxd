cdef class RunnableCounter:
    cdef public long long runnable
    cdef public bint live
    # The run it counts, and the parts of trio's runner a modeled call touches on every
    # park and wake (constant for the run): read once at ``before_run``.
    cdef readonly object runner
    cdef object runq
    cdef dict hooks
    cdef object deadlines
    cdef readonly bint own_clock    # the run's clock is the EngineClock this counter belongs to


cdef RunnableCounter live_counter()
