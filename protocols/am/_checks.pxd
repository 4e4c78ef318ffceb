# What AM's calls accept (the implementation and the errors: _checks.pyx), as C calls for
# the call paths of the endpoint chain.
cpdef int handler_index(object h) except -1
cpdef object word(object a)
cpdef bytes pack_words(object args)
cpdef check_count(object n)
cpdef check_remote(object raddr, object nbytes)
