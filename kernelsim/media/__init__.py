"""Media: what carries frames between nodes' devices.

Modeled media (``ether``) time every frame as the hardware would; real media
(``real``: shared-memory rings between processes, UDP between hosts) carry the
same frames in wall time. A device model talks to either through a *port*:
``transmit(frame, t) -> (start, end)`` and, for real ports, ``poll()``.
"""
from kernelsim.media.ether import EtherLink, EtherPort
from kernelsim.media.faults import FaultInjector

__all__ = ["EtherLink", "EtherPort", "FaultInjector"]
