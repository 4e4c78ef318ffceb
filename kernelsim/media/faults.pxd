cdef class FaultInjector:
    cdef public object loss, corrupt, duplicate, reorder, reorder_delay_s, rng
    cdef public object lost, corrupted, duplicated, reordered
    cdef public bint active


cdef inline bint faults_active(object faults) except -1:
    """``faults.active``: a C read for a `FaultInjector`, by name for any other injector
    (a wrapper such as the AM stress test's)."""
    if type(faults) is FaultInjector:
        return (<FaultInjector> faults).active
    return bool(faults.active)
