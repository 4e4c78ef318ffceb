# A kernel path as a C state machine: what the CPU (and the paths that run other
# paths: the interrupt path, the kernel entries) step with a C call instead of a
# generator resume. `_path.pyx` says why and how.
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from kernelsim._pyiter cimport resume


cdef class Path:
    cdef object value           # what the path returned, once `step` has said 0

    # 1: the path spent `cost[0]` seconds of CPU time and goes on after it (a yield);
    # 0: it returned `self.value`. An error is raised at the instant it happens.
    cdef int step(self, double* cost) except -1


cdef class RxHandler:
    # A protocol's receive hand-off (`NetDevice.add_protocol`) as a C call: see _path.pyx.
    cdef int rx(self, object dev, Py_ssize_t addr, Py_ssize_t length, double* cost,
                PyObject** cont) except -1


cdef inline int step_any(object path, double* cost, PyObject** res) except -1:
    """Step `path`: a Path by its C call, anything else (a generator) by a resume.

    1: it yielded `cost[0]`; 0: it returned, a new reference to its value in `res[0]`.
    """
    cdef int r
    cdef object v
    if isinstance(path, Path):
        r = (<Path> path).step(cost)
        if r == 0:
            v = (<Path> path).value
            (<Path> path).value = None
            Py_INCREF(v)
            res[0] = <PyObject*> v
        return r
    r = resume(path, res)
    if r == 1:
        v = <object> res[0]
        Py_XDECREF(res[0])
        res[0] = NULL
        cost[0] = <double> v
    return r
