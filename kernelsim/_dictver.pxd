# A dict's version tag (PEP 509): a number that changes whenever the dict does, and that no
# other dict ever has (CPython takes it from one global counter). A per-call lookup in a
# table that almost never changes (a node's call gates, its services) keeps what it found
# with the tag it was found under, and looks again only when the tag moved: the same
# answer the lookup would give, for a C comparison. 0 where this Python has no tag (3.12
# deprecated it): then always look.
cdef extern from *:
    """
    #if PY_VERSION_HEX < 0x030C0000
    #define __pyx_dp_dict_version(d) ((unsigned long long) ((PyDictObject*) (d))->ma_version_tag)
    #else
    #define __pyx_dp_dict_version(d) ((unsigned long long) 0)
    #endif
    """
    unsigned long long dict_version "__pyx_dp_dict_version"(object d) noexcept     # d: a dict (or subclass)
