"""The node's control protocol: messages on a UNIX SOCK_SEQPACKET socket.

One message = ``u32 header length | JSON header | payload bytes``, with file
descriptors riding along as SCM_RIGHTS. SEQPACKET keeps message boundaries and says
when the peer is gone (a zero-length read), which is how a node notices a process that
died and a process notices a node that died. JSON, not pickle: the node runs as root and
must not execute what a client sends. A call's bytes argument or result travels as the
payload, its place in the header marked ``{"$b": 1}``.
"""
from __future__ import annotations

import array
import errno
import json
import socket
import struct

__all__ = ["send_msg", "recv_msg", "MAX_MESSAGE", "MAX_FDS", "BYTES", "pack_args", "unpack_args", "errno_reply"]

MAX_MESSAGE = 1 << 20           # header + payload
MAX_FDS = 16
BYTES = {"$b": 1}
_LEN = struct.Struct("<I")
_ANC = socket.CMSG_SPACE(MAX_FDS * 4)


def send_msg(sock: socket.socket, header: dict, payload=b"", fds=()) -> None:
    h = json.dumps(header, separators=(",", ":")).encode()
    parts = [_LEN.pack(len(h)), h, payload] if payload else [_LEN.pack(len(h)), h]
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg(parts, anc)


def recv_msg(sock: socket.socket):
    """(header, payload, fds), or None when the peer has gone. BlockingIOError if nothing is there."""
    msg, anc, flags, _ = sock.recvmsg(MAX_MESSAGE, _ANC)
    fds = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(data[:len(data) - len(data) % a.itemsize])
            fds.extend(a)
    if not msg:
        for fd in fds:
            _close(fd)
        return None
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(msg) < 4:
        for fd in fds:
            _close(fd)
        raise OSError(errno.EPROTO, "truncated or malformed control message")
    (n,) = _LEN.unpack_from(msg)
    if 4 + n > len(msg):
        raise OSError(errno.EPROTO, "control message header longer than the message")
    try:
        header = json.loads(msg[4:4 + n])
    except ValueError:
        raise OSError(errno.EPROTO, "control message header is not JSON") from None
    if not isinstance(header, dict):
        raise OSError(errno.EPROTO, "control message header is not an object")
    return header, msg[4 + n:], fds


def _close(fd: int) -> None:
    try:
        import os
        os.close(fd)
    except OSError:
        pass


def pack_args(args) -> tuple[list, bytes]:
    """Arguments for the header, and the one bytes-like argument (if any) as the payload."""
    out, payload = [], b""
    for a in args:
        if isinstance(a, (bytes, bytearray, memoryview)):
            if payload:
                raise OSError(errno.EINVAL, "a call carries at most one bytes argument")
            payload = bytes(a) or b""
            out.append(BYTES if payload else {"$b": 0})
        else:
            out.append(a)
    return out, payload


def unpack_args(args: list, payload: bytes) -> tuple:
    if not isinstance(args, list):
        raise OSError(errno.EPROTO, "call arguments are not a list")
    return tuple((payload if a.get("$b") else b"") if isinstance(a, dict) and "$b" in a else
                 tuple(a) if isinstance(a, list) else a for a in args)


def errno_reply(call_id, exc: BaseException) -> dict:
    if isinstance(exc, OSError):
        return {"id": call_id, "errno": exc.errno or errno.EIO, "error": exc.strerror or str(exc),
                "type": "BlockingIOError" if isinstance(exc, BlockingIOError) else "OSError"}
    if isinstance(exc, ValueError):
        return {"id": call_id, "errno": errno.EINVAL, "error": str(exc), "type": "ValueError"}
    if isinstance(exc, TypeError):
        return {"id": call_id, "errno": errno.EINVAL, "error": str(exc), "type": "OSError"}
    return {"id": call_id, "errno": errno.EIO, "error": f"{type(exc).__name__}: {exc}", "type": "OSError"}
