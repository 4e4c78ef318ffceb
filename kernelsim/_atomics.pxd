# Loads and stores of words that another process (or the kernel) reads and writes at the
# same time: the shared-memory frame rings (kernelsim.media._shmring), the node's event
# rings (kernelsim.daemon._rings), an endpoint's error word (libdp._endpoint_rings) and
# FM's shared-memory transport table (protocols.fm._smt).
# Acquire pairs with release: what the writer stored before its release store is visible
# to a reader after its acquire load of the same word. Relaxed is for a word only its
# owner writes (its own index, its counters). One definition, included once per module.
from libc.stdint cimport uint32_t, uint64_t

cdef extern from *:
    """
    #ifndef DP_ATOMICS_H
    #define DP_ATOMICS_H
    #include <stdint.h>
    static inline uint64_t dp_load_acq64(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline uint64_t dp_load_rlx64(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
    static inline uint32_t dp_load_acq32(const uint32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline uint32_t dp_load_rlx32(const uint32_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
    static inline void dp_store_rel64(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
    static inline void dp_store_rlx64(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
    static inline void dp_store_rel32(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
    static inline void dp_store_rlx32(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
    static inline uint32_t dp_xchg32(uint32_t *p, uint32_t v) { return __atomic_exchange_n(p, v, __ATOMIC_ACQ_REL); }
    static inline uint64_t dp_fetch_add64(uint64_t *p, uint64_t v) { return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL); }
    /* 1 if *p held `expect` and now holds v */
    static inline int dp_cas32(uint32_t *p, uint32_t expect, uint32_t v) { return __atomic_compare_exchange_n(p, &expect, v, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE); }
    static inline void dp_fence_seq_cst(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
    /* a counter bumped by its single owner: relaxed load, relaxed store */
    static inline void dp_bump64(uint64_t *p) { __atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED); }
    #endif
    """
    uint64_t dp_load_acq64(const uint64_t *p) noexcept nogil
    uint64_t dp_load_rlx64(const uint64_t *p) noexcept nogil
    uint32_t dp_load_acq32(const uint32_t *p) noexcept nogil
    uint32_t dp_load_rlx32(const uint32_t *p) noexcept nogil
    void dp_store_rel64(uint64_t *p, uint64_t v) noexcept nogil
    void dp_store_rlx64(uint64_t *p, uint64_t v) noexcept nogil
    void dp_store_rel32(uint32_t *p, uint32_t v) noexcept nogil
    void dp_store_rlx32(uint32_t *p, uint32_t v) noexcept nogil
    uint32_t dp_xchg32(uint32_t *p, uint32_t v) noexcept nogil
    uint64_t dp_fetch_add64(uint64_t *p, uint64_t v) noexcept nogil
    int dp_cas32(uint32_t *p, uint32_t expect, uint32_t v) noexcept nogil
    void dp_fence_seq_cst() noexcept nogil
    void dp_bump64(uint64_t *p) noexcept nogil
