"""A cluster of network namespaces: one per node, joined by veth pairs (pyroute2).

    with NetnsCluster.create(nodes=2, macs={0: mac0, 1: mac1}) as nc:
        ns, ifname = nc.iface(0)      # join `ns` (pyroute2.netns.setns), then open ifname

* Two nodes: one veth pair, one end in each node's namespace -- a back-to-back cable.
* More nodes: a third kind of namespace, the "switch", holds a Linux bridge; each node
  has a veth pair from its namespace to a bridge port -- a learning Ethernet switch.

Every node-side interface is called ``eth0`` (each lives in a namespace of its own),
has the MAC the caller gave for that node, the given MTU (1500 by default) and is up.
Namespace names are ``{prefix}-{pid}-{random}-n{nid}`` (and ``...-sw``), so concurrent
runs, and several clusters of one process, never collide. :meth:`NetnsCluster.destroy`
removes them all (idempotent; the veths and the bridge go with their namespaces).

Creating namespaces needs CAP_SYS_ADMIN and CAP_NET_ADMIN (root):
:meth:`NetnsCluster.available` says whether this process can, and if not why.

Faults on these links are the kernel's: :meth:`NetnsCluster.shape` installs a netem
qdisc on every node's interface (each frame crosses exactly one: its sender's) for
loss, corruption, duplication, reordering and a rate; a kernel built without netem
(``CONFIG_NET_SCH_NETEM``) is ``ENOTSUP``, and a rate alone then falls back to a token
bucket (tbf). netem draws from the kernel's random numbers: it is not seeded.
"""
from __future__ import annotations

import errno
import os
import secrets
import socket
import time

__all__ = ["NetnsCluster", "NODE_IFNAME", "LinkShape"]

NODE_IFNAME = "eth0"
BRIDGE_IFNAME = "br0"
_CAP_NET_ADMIN = 12
_CAP_NET_RAW = 13
_CAP_SYS_ADMIN = 21


def _mac_text(mac) -> str:
    if isinstance(mac, str):
        mac = bytes.fromhex(mac.replace(":", "").replace("-", ""))
    mac = bytes(mac)
    if len(mac) != 6:
        raise ValueError(f"a MAC address has 6 bytes, not {len(mac)}")
    if mac[0] & 1:
        raise ValueError(f"{mac.hex(':')} is a multicast address: an interface needs a unicast MAC")
    return mac.hex(":")


def _effective_caps() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return None


def _pyroute2():
    try:
        from pyroute2 import IPRoute, netns
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise OSError(errno.ENOSYS, f"network namespaces need pyroute2 ({exc})") from None
    return IPRoute, netns


class LinkShape:
    """What a netem qdisc is asked to do to every frame a node sends (probabilities 0..1)."""

    __slots__ = ("loss", "corrupt", "duplicate", "reorder", "reorder_delay_s", "rate_bps")

    def __init__(self, loss=0.0, corrupt=0.0, duplicate=0.0, reorder=0.0, reorder_delay_s=0.0, rate_bps=None):
        for name, v in (("loss", loss), ("corrupt", corrupt), ("duplicate", duplicate), ("reorder", reorder)):
            if not 0.0 <= v <= 1.0:
                raise OSError(errno.EINVAL, f"fault.{name} is a probability, not {v}")
        if reorder and reorder_delay_s <= 0:
            raise OSError(errno.EINVAL, "netem reorders by delaying the other frames: fault.reorder needs "
                                        "fault.reorder_delay_s > 0")
        if rate_bps is not None and not rate_bps >= 8:
            raise OSError(errno.EINVAL, f"a link rate must be at least 8 bit/s, not {rate_bps}")
        self.loss, self.corrupt, self.duplicate, self.reorder = loss, corrupt, duplicate, reorder
        self.reorder_delay_s = reorder_delay_s if reorder else 0.0
        self.rate_bps = rate_bps

    @property
    def faulty(self) -> bool:
        return bool(self.loss or self.corrupt or self.duplicate or self.reorder)

    def netem(self) -> dict:
        """pyroute2's netem arguments (percentages, delay in microseconds, rate in bit/s)."""
        kw = {"loss": self.loss * 100, "duplicate": self.duplicate * 100}
        if self.corrupt:
            kw["prob_corrupt"] = self.corrupt * 100
        if self.reorder:
            kw["prob_reorder"] = self.reorder * 100
            kw["delay"] = self.reorder_delay_s * 1e6
        if self.rate_bps is not None:
            kw["rate"] = f"{int(self.rate_bps)}bit"
        return kw

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


class NetnsCluster:
    """Network namespaces standing in for a cluster's hosts and its cable or switch."""

    def __init__(self, names: dict, switch: str | None, macs: dict, mtu: int):
        self._names = dict(names)          # nid -> namespace name
        self.switch = switch               # the bridge's namespace (more than two nodes), or None
        self.macs = dict(macs)
        self.mtu = mtu

    # ----------------------------------------------------------------- building

    @classmethod
    def create(cls, nodes: int = 2, prefix: str = "dp", macs: dict | None = None,
               mtu: int = 1500, ready_timeout: float = 5.0) -> "NetnsCluster":
        """Namespaces for `nodes` nodes; `macs` maps node id -> MAC (6 bytes or text).

        Nodes without a MAC in `macs` get the kernel's random one. Returns once every
        link is up with carrier (a bridge forwards on a port only from then on), or
        raises TimeoutError after `ready_timeout` s. Anything made is removed again if
        a later step fails.
        """
        if not isinstance(nodes, int) or nodes < 2:
            raise OSError(errno.EINVAL, f"a network of namespaces needs at least 2 nodes, not {nodes!r}")
        if not 68 <= mtu <= 65535:
            raise OSError(errno.EINVAL, f"MTU {mtu} out of range 68..65535")
        macs = {} if macs is None else dict(macs)
        unknown = set(macs) - set(range(nodes))
        if unknown:
            raise OSError(errno.EINVAL, f"MACs given for nodes {sorted(unknown)} of a {nodes}-node cluster")
        text = {nid: _mac_text(m) for nid, m in macs.items()}
        if len(set(text.values())) != len(text):
            raise OSError(errno.EINVAL, "two nodes were given the same MAC")
        IPRoute, netns = _pyroute2()
        base = f"{prefix}-{os.getpid()}-{secrets.token_hex(3)}"
        names = {nid: f"{base}-n{nid}" for nid in range(nodes)}
        switch = f"{base}-sw" if nodes > 2 else None
        self = cls(names, switch, macs, mtu)
        try:
            for name in self.namespaces:
                try:
                    netns.create(name)
                except OSError as exc:
                    raise _privileged(exc, f"cannot create network namespace {name!r}") from None
            if switch is None:
                self._cable(IPRoute, names[0], names[1])
            else:
                self._switch(IPRoute, names, switch)
            for nid, name in names.items():
                with IPRoute(netns=name, flags=0) as ipr:
                    idx = ipr.link_lookup(ifname=NODE_IFNAME)[0]
                    kw = {"address": text[nid]} if nid in text else {}
                    ipr.link("set", index=idx, mtu=mtu, **kw)
                    _quiet(ipr, idx)
                    ipr.link("set", index=idx, state="up")
            self._wait_up(IPRoute, ready_timeout)
        except BaseException:
            self.destroy()
            raise
        return self

    def _cable(self, IPRoute, ns0: str, ns1: str) -> None:
        """One veth pair, created inside node 0's namespace with its peer in node 1's.

        Node 0's end gets ifindex 100 (its namespace is new: free), so the two ends'
        ifindexes differ: the kernel's linkwatch then takes their carrier-on as urgent
        instead of deferring it up to a second (until then a veth's qdisc drops frames).
        """
        with IPRoute(netns=ns0, flags=0) as ipr:
            ipr.link("add", ifname=NODE_IFNAME, index=100, kind="veth",
                     peer={"ifname": NODE_IFNAME, "net_ns_fd": ns1})

    def _switch(self, IPRoute, names: dict, switch: str) -> None:
        """A bridge in the switch namespace; port p<nid> is the peer of node nid's eth0."""
        with IPRoute(netns=switch, flags=0) as ipr:
            ipr.link("add", ifname=BRIDGE_IFNAME, kind="bridge", br_stp_state=0, br_forward_delay=0)
            br = ipr.link_lookup(ifname=BRIDGE_IFNAME)[0]
            for nid, name in names.items():
                port = f"p{nid}"
                ipr.link("add", ifname=port, kind="veth", peer={"ifname": NODE_IFNAME, "net_ns_fd": name})
                idx = ipr.link_lookup(ifname=port)[0]
                ipr.link("set", index=idx, mtu=self.mtu, master=br)
                _quiet(ipr, idx)
                ipr.link("set", index=idx, state="up")
            ipr.link("set", index=br, mtu=self.mtu)
            _quiet(ipr, br)
            ipr.link("set", index=br, state="up")

    def _wait_up(self, IPRoute, timeout: float) -> None:
        """Poll until every veth (and bridge) reports operstate UP: carrier changes
        reach the bridge through the kernel's linkwatch, which may defer them ~1 s."""
        deadline = time.monotonic() + timeout
        for name in self.namespaces:
            with IPRoute(netns=name, flags=0) as ipr:
                while True:
                    down = [link.get("ifname") for link in ipr.get_links()
                            if link.get("ifname") != "lo" and link.get("operstate") != "UP"]
                    if not down:
                        break
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"links {down} of namespace {name!r} not up after {timeout} s")
                    time.sleep(0.005)

    # ----------------------------------------------------------------- using

    @property
    def nodes(self) -> int:
        return len(self._names)

    @property
    def namespaces(self) -> list[str]:
        """Every namespace of this cluster (nodes first, then the switch if any)."""
        return list(self._names.values()) + ([self.switch] if self.switch else [])

    def iface(self, nid: int) -> tuple[str, str]:
        """(namespace name, interface name) of node `nid`."""
        try:
            return self._names[nid], NODE_IFNAME
        except KeyError:
            raise OSError(errno.EINVAL, f"no node {nid} in a {self.nodes}-node namespace cluster") from None

    def exists(self) -> bool:
        """Is any of this cluster's namespaces still there?"""
        _, netns = _pyroute2()
        present = set(netns.listnetns())
        return any(n in present for n in self.namespaces)

    def shape(self, shape: LinkShape) -> str:
        """Shape every node's outgoing frames; returns the qdisc used ("netem" or "tbf").

        ENOTSUP if the kernel has no netem and faults were asked for (the caller may
        then inject them itself); a rate alone falls back to tbf.
        """
        IPRoute, _ = _pyroute2()
        kind = None
        for nid in sorted(self._names):
            with IPRoute(netns=self._names[nid], flags=0) as ipr:
                idx = ipr.link_lookup(ifname=NODE_IFNAME)[0]
                if kind is None:
                    kind = "netem" if _has_netem(ipr, idx) else "tbf"
                    if kind == "tbf" and shape.faulty:
                        raise OSError(errno.ENOTSUP, "this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM): "
                                                     "the veths cannot be made lossy")
                try:
                    if kind == "netem":
                        ipr.tc("replace", "netem", index=idx, handle="1:", **shape.netem())
                    elif shape.rate_bps is not None:
                        # a token bucket one maximum frame deep, frames queued at most 50 ms
                        ipr.tc("replace", "tbf", index=idx, handle="1:", rate=f"{int(shape.rate_bps)}bit",
                               burst=max(self.mtu + 14, 1600), latency=50000)
                except Exception as exc:   # noqa: BLE001 - pyroute2's NetlinkError carries the errno
                    raise OSError(getattr(exc, "code", None) or errno.EINVAL,
                                  f"cannot install {kind} on {self._names[nid]}: {exc}") from None
        return kind

    def qdiscs(self, nid: int) -> list[str]:
        """The kinds of the qdiscs on node `nid`'s interface (what :meth:`shape` installed)."""
        IPRoute, _ = _pyroute2()
        with IPRoute(netns=self.iface(nid)[0], flags=0) as ipr:
            idx = ipr.link_lookup(ifname=NODE_IFNAME)[0]
            return [q.get_attr("TCA_KIND") for q in ipr.get_qdiscs(index=idx)]

    # ----------------------------------------------------------------- tearing down

    def destroy(self) -> None:
        """Remove every namespace of this cluster (and so its veths and bridge); idempotent."""
        _, netns = _pyroute2()
        present = set(netns.listnetns())
        errors = []
        for name in self.namespaces:
            if name not in present:
                continue
            try:
                netns.remove(name)
            except FileNotFoundError:
                pass
            except OSError as exc:
                errors.append(f"{name}: {exc}")
        if errors:
            raise OSError(errno.EBUSY, "could not remove network namespaces: " + "; ".join(errors))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __repr__(self):
        kind = f"switch {self.switch!r}" if self.switch else "veth pair"
        return f"<NetnsCluster {self.nodes} nodes, {kind}, namespaces {list(self._names.values())!r}>"

    # ----------------------------------------------------------------- can we?

    _available: tuple[bool, str] | None = None

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """(True, "") if this process can build a namespace cluster and open raw sockets,
        else (False, why). Probes once per process by building and removing a 2-node cluster."""
        if cls._available is None:
            cls._available = cls._probe()
        return cls._available

    @staticmethod
    def _probe() -> tuple[bool, str]:
        if not hasattr(socket, "AF_PACKET") or not os.path.isdir("/proc/self/ns"):
            return False, "network namespaces and AF_PACKET are Linux-only"
        try:
            _pyroute2()
        except OSError as exc:
            return False, exc.strerror
        caps = _effective_caps()
        if os.geteuid() != 0 and (caps is None or not all(caps >> c & 1 for c in
                                                          (_CAP_SYS_ADMIN, _CAP_NET_ADMIN, _CAP_NET_RAW))):
            return False, ("network namespaces and raw sockets need root "
                           "(CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_NET_RAW)")
        try:
            socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close()
        except OSError as exc:
            return False, f"cannot open an AF_PACKET socket (needs CAP_NET_RAW): {exc.strerror}"
        try:
            NetnsCluster.create(2, prefix="dpprobe").destroy()
        except Exception as exc:   # noqa: BLE001 - any failure means: not here
            return False, f"cannot create network namespaces with a veth pair: {exc}"
        return True, ""


def _quiet(ipr, idx: int) -> None:
    """No IPv6 link-local address on this link (addr_gen_mode none), so the kernel sends
    no DAD, router solicitations or MLD reports: the wire carries the cluster's frames only."""
    try:
        ipr.link("set", index=idx, IFLA_AF_SPEC={"attrs": [
            ("AF_INET6", {"attrs": [("IFLA_INET6_ADDR_GEN_MODE", 1)]})]})
    except Exception:   # noqa: BLE001 - no IPv6 in this kernel: nothing to silence
        pass


def _has_netem(ipr, idx: int) -> bool:
    """Does this kernel have the netem qdisc? (Adding one is ENOENT if not.)"""
    try:
        ipr.tc("replace", "netem", index=idx, handle="1:")
    except Exception as exc:   # noqa: BLE001
        if getattr(exc, "code", None) == errno.ENOENT:
            return False
        raise
    ipr.tc("del", index=idx, handle="1:")
    return True


def _privileged(exc: OSError, what: str) -> OSError:
    if exc.errno in (errno.EPERM, errno.EACCES):
        return PermissionError(errno.EPERM, f"{what}: needs CAP_SYS_ADMIN and CAP_NET_ADMIN -- run as root")
    return OSError(exc.errno, f"{what}: {exc.strerror or exc}")
