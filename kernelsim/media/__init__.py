"""Media: what carries frames between nodes' devices.

Modeled media (``ether``) time every frame as the hardware would; real media carry
the same frames in wall time: ``real`` (shared-memory rings between processes, UDP
between hosts) and ``packet`` (raw Ethernet frames with DP's EtherType on a Linux
interface, AF_PACKET), with ``netns`` making network namespaces and veth pairs
(pyroute2) that stand in for a cluster's hosts. A device model talks to either through a *port*:
``transmit(frame, t) -> (start, end)`` and, for real ports, ``poll()``.
"""
from kernelsim.media.ether import EtherLink, EtherPort
from kernelsim.media.faults import FaultInjector

__all__ = ["EtherLink", "EtherPort", "FaultInjector"]
