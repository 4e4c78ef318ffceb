"""The window benchmark's own little protocol (libdp/_bench.py): marks and acks.

Driven directly with a scripted endpoint, so each rule is checked by itself."""
import trio

from libdp import _bench as B


class ScriptedEndpoint:
    """Reads return the scripted messages in order (then nothing, for ever); writes are kept."""

    def __init__(self, incoming, ack_after=None):
        self.incoming = list(incoming)
        self.written = []
        self.ack_after = ack_after            # answer the n-th mark written with this ack

    async def dp_read(self, fd, nbytes):
        if self.incoming:
            await trio.lowlevel.checkpoint()
            return self.incoming.pop(0)
        await trio.sleep_forever()

    async def dp_write(self, fd, data):
        self.written.append(bytes(data))
        if self.ack_after and data[:1] == bytes([B.MARK]):
            n = sum(1 for m in self.written if m[:1] == bytes([B.MARK]))
            if n == self.ack_after[0]:
                self.incoming.append(self.ack_after[1])


def mark(w):
    return bytes([B.MARK]) + w.to_bytes(4, "big")


def acks(written):
    return [(int.from_bytes(m[1:5], "big"), int.from_bytes(m[5:9], "big")) for m in written if m[0] == B.ACK]


def test_a_stale_mark_is_answered_without_restarting_the_current_window(autojump_clock):
    data = bytes(32)
    ep = ScriptedEndpoint([data] * 3 + [mark(0)]      # window 0 lost one message: its mark closes it
                          + [data] * 2 + [mark(0)]    # the ack of window 0 was lost: asked again
                          + [data] * 2 + [B.END_MARK])  # window 1 completes (4 messages)
    trio.run(B._receive_windows, ep, 3, 32, 4, clock=autojump_clock)
    assert acks(ep.written) == [(0, 3), (0, 5), (1, 7)]


def test_marks_back_off_so_a_slow_window_is_waited_for(autojump_clock):
    """The ack comes only after the 4th mark: each mark waited twice as long as the one
    before, and the window counts as acknowledged, not lost."""
    ack = bytes([B.ACK]) + (0).to_bytes(4, "big") + (64).to_bytes(4, "big")
    ep = ScriptedEndpoint([], ack_after=(4, ack))

    async def main():
        t0 = trio.current_time()
        got = await B._close_window(ep, 3, 0, 0.001)
        return got, trio.current_time() - t0
    got, waited = trio.run(main, clock=autojump_clock)
    assert got == 64
    assert sum(1 for m in ep.written if m == mark(0)) == 4
    assert abs(waited - 0.001 * (1 + 1 + 2 + 4)) < 1e-9      # base, then 1x, 2x, 4x after the marks
