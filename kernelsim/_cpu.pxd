from kernelsim._engine cimport Engine

cdef class _Job:
    cdef object gen
    cdef object on_done
    cdef double remaining
    cdef int level
    cdef bint queued_first

cdef class Cpu:
    cdef Engine engine
    cdef readonly bint modeled
    cdef list _queues          # [irq jobs, process jobs], FIFO each
    cdef _Job _running
    cdef double _seg_end
    cdef double _seg_start
    cdef long long _ev
    cdef bint _in_real_run
    cdef readonly double busy_irq_s
    cdef readonly double busy_proc_s
    cdef readonly long long jobs_irq
    cdef readonly long long jobs_proc
    cdef readonly long long preemptions
    cdef object _segment_done_cb      # the bound method, made once: no object per event

    cpdef submit(self, int level, object gen, object on_done)
    cdef _dispatch(self)
    cdef _advance(self, _Job job)
    cdef _start_segment(self, _Job job, double cost)
    cdef _finish(self, _Job job, object value, object exc)
    cdef _run_real(self)
