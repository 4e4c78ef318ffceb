"""The control-socket link of an attached process (libdp._attach.NodeLink) with several trio
tasks: whichever task reads the socket, every caller gets its answer. No node: the test
plays the node on the other end of a socket pair."""
import socket

import pytest
import trio
import trio.testing

from kernelsim.daemon import recv_msg, send_msg
from libdp._attach import NodeLink


@pytest.mark.trio
async def test_an_answer_another_task_read_off_the_socket_wakes_its_caller(autojump_clock):
    """bibw's two tasks share one link: one waits for its call's answer on the socket, the
    other (waiting on its endpoint, whose wait set includes the socket) reads the socket
    first and files the answer. The caller must still wake -- it hung before (a real
    bibw run stuck in dp_open/dp_target, its peer's handshake timing out)."""
    ours, node = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    link = NodeLink(ours, {"nid": 0})
    got = []
    try:
        async def caller():
            got.append(await link.acall_full({"op": "admin", "cmd": "stats"}))

        with trio.fail_after(5):            # virtual time (autojump): fails at once if it hangs
            async with trio.open_nursery() as nursery:
                nursery.start_soon(caller)
                await trio.testing.wait_all_tasks_blocked()     # the caller sleeps on the socket
                request = recv_msg(node)[0]
                send_msg(node, {"id": request["id"], "ret": 7})
                link.pump()                 # the other task reads it first, in the same step
        assert got and got[0][0]["ret"] == 7
    finally:
        ours.close()
        node.close()
