"""What AM's calls accept: handler indexes, 32-bit words, byte counts, remote ranges.

Every misuse is an OSError with the errno a UNIX programmer expects, raised at the
caller before anything is queued.
"""
from __future__ import annotations

import errno

from protocols.am import _wire as W

__all__ = ["MAX_HANDLERS", "U32", "handler_index", "word", "pack_words", "check_count", "check_remote"]

MAX_HANDLERS = 256
U32 = 0xFFFFFFFF


def handler_index(h) -> int:
    if not isinstance(h, int) or isinstance(h, bool) or not 0 <= h < MAX_HANDLERS:
        raise OSError(errno.EINVAL, f"handler index must be 0..{MAX_HANDLERS - 1}, not {h!r}")
    return h


def word(a) -> int:
    """An argument word: an unsigned 32-bit value (SP-A34), as a handler receives it."""
    if not isinstance(a, int) or isinstance(a, bool) or not 0 <= a <= U32:
        raise OSError(errno.EINVAL, f"an AM argument is an unsigned 32-bit word (0..{U32}), not {a!r}")
    return a


def pack_words(args) -> bytes:
    if len(args) > W.MAX_WORDS:
        raise OSError(errno.EINVAL, f"an AM message carries at most {W.MAX_WORDS} words (SP-A34), not {len(args)}")
    return b"".join(word(a).to_bytes(4, "big") for a in args)


def check_count(n) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise OSError(errno.EINVAL, f"byte count must be a non-negative int, not {n!r}")


def check_remote(raddr, nbytes) -> None:
    if not isinstance(raddr, int) or isinstance(raddr, bool) or raddr < 0 or raddr + nbytes > U32:
        raise OSError(errno.EFAULT, f"remote address {raddr!r}+{nbytes} cannot name target memory")
