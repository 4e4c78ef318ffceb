# Resuming a generator from C: the kernel paths' C iterators (_cpu, _irq, _node, _trio)
# step Python generators with PyIter_Send instead of a Python-level send() per resume.
from cpython.ref cimport PyObject


cdef extern from "Python.h":
    ctypedef enum PySendResult:
        PYGEN_RETURN
        PYGEN_ERROR
        PYGEN_NEXT
    PySendResult PyIter_Send(object iter, object arg, PyObject** presult)


cdef inline int resume(object gen, PyObject** result) except -1:
    """Resume `gen`: 1 and what it yielded, 0 and what it returned; or raise its error."""
    return <int> PyIter_Send(gen, None, result)
