# The keep-alive's part of the SP AM endpoint chain (fields: window.pxd).
from protocols.am.window cimport Window


cdef class KeepAlive(Window):
    pass
