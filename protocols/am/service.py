"""The kernel's part of SP AM: who gets the card, and the one system call.

SP AM needs almost nothing from the kernel -- that is its point -- but what it needs
only the kernel can give: the TB2's FIFOs mapped into one process (SP-A18), and
memory pinned so the adapter can DMA into it. This service:

* **reserves the card** while the module is loaded. DP and a raw FIFO program cannot
  take the TB2 from under AM (both get EBUSY from the adapter's claim); the card passes
  to the AM process when it opens its endpoint and comes back to the reservation when
  that endpoint closes.
* offers **``am_open``**, a system call: the calling process gets the FIFOs
  (``Tb2NetDevice.open_user``) and an AM endpoint as a file descriptor; its segments
  are pinned node memory. Each open endpoint holds a reference on the module, so
  ``rmmod am`` is EBUSY while one lives.
* keeps the counters of closed endpoints, so ``--stats`` after a benchmark shows them.

A card still sending when its endpoint closes stays with the closing FIFOs until the
adapter has taken every packet (``HostFifos.detach``); the reservation, and DP's
return at ``rmmod am``, wait for that moment (`when_card_free`).
"""
from __future__ import annotations

import errno

from protocols.am.endpoint import STAT_KEYS, AmEndpoint

__all__ = ["AmService", "when_card_free"]


def when_card_free(adapter, fn) -> None:
    """Run `fn()` now if no one holds the adapter, else as soon as its holder lets go."""
    if adapter.owner is None:
        fn()
        return
    prev = adapter.on_tx_space

    def hook():
        if prev is not None:
            prev()
        if adapter.owner is None:
            if adapter.on_tx_space is hook:
                adapter.on_tx_space = None
            fn()

    adapter.on_tx_space = hook


class _Reservation:
    """The adapter's owner while the am module is loaded and no endpoint is open."""

    def __init__(self, nid):
        self.nid = nid

    def __repr__(self):
        return ("the am module (SP AM reserves the card for its one user process; close the AM endpoint "
                "and rmmod am to give it back)")


class AmService:
    def __init__(self, kernel, netdev, params: dict):
        self.node = kernel
        self.netdev = netdev
        self.adapter = netdev.dev
        self.params = dict(params)
        self.reservation = _Reservation(kernel.nid)
        self.endpoint: AmEndpoint | None = None
        self.loaded = True
        self.opened = 0
        self.totals = {k: 0 for k in STAT_KEYS}
        self.malformed_totals: dict = {}
        self.last_closed: dict | None = None
        self.c_open = kernel.costs.cycles(params["open_cycles"])

    # -- the card ----------------------------------------------------------------------------

    def reserve(self) -> None:
        self.adapter.claim(self.reservation)

    def unreserve(self) -> None:
        self.loaded = False
        self.adapter.release(self.reservation)

    def _rereserve(self) -> None:
        if self.loaded and self.endpoint is None and self.adapter.owner is None:
            self.adapter.claim(self.reservation)

    # -- am_open -------------------------------------------------------------------------------

    def sys_open(self, proc):
        """am_open(): the FIFOs and an AM endpoint for the calling process, as an fd."""
        yield self.c_open
        if self.endpoint is not None:
            raise OSError(errno.EBUSY, f"node {self.node.nid}: process {self.endpoint.proc.pid} already has the AM "
                                       "endpoint (one user process per node, SP-A18)")
        a = self.adapter
        if a.owner is not self.reservation and a.owner is not None:
            raise OSError(errno.EBUSY, f"node {self.node.nid}: the TB2 is still held by {a.owner!r}")
        a.release(self.reservation)
        try:
            uf = self.netdev.open_user(proc, self.params["pop_every"])
        except BaseException:
            self._rereserve()
            raise
        try:
            ep = AmEndpoint(self, proc, uf, self.params)
        except BaseException:
            uf.close()
            when_card_free(a, self._rereserve)
            raise
        self.endpoint = ep
        self.opened += 1
        self.node.modules.module_get("am")
        ep.fd = proc.fds.install(ep)
        return ep.fd

    def endpoint_closed(self, ep: AmEndpoint) -> None:
        if self.endpoint is not ep:
            return
        self.endpoint = None
        st = ep.stats()
        for k in STAT_KEYS:
            self.totals[k] += st.get(k, 0)
        for k, v in st["malformed"].items():
            self.malformed_totals[k] = self.malformed_totals.get(k, 0) + v
        self.last_closed = st
        self.node.modules.module_put("am")
        when_card_free(self.adapter, self._rereserve)

    def stats(self) -> dict:
        out = {"endpoint_open": self.endpoint is not None, "endpoints_opened": self.opened,
               "closed_totals": dict(self.totals), "closed_malformed": dict(self.malformed_totals)}
        if self.endpoint is not None:
            out["endpoint"] = self.endpoint.stats()
        elif self.last_closed is not None:
            out["last_endpoint"] = self.last_closed
        return out
