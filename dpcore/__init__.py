"""dpcore: DP's services layer in the kernel.

Endpoints, Token Buffer Pools, the NART, the Directed Message header codec, the MDR
receive dispatch and the transmit path that builds frames in the NIC's transmit
buffers. Loaded into a node as the kernel module ``dp`` (`dpcore.module.MODULE`).
"""
from dpcore._codec import DM_HEADER_BYTES, DM_MAX_LENGTH, DM_MAX_TYPE, DM_TYPE_DATA, dm_pack, dm_unpack
from dpcore._services import DP_ETHERTYPE, DirectedPoint, Endpoint, Nart, Token
from dpcore._tbp import TokenBufferPool

__all__ = ["DM_HEADER_BYTES", "DM_MAX_LENGTH", "DM_MAX_TYPE", "DM_TYPE_DATA", "DP_ETHERTYPE", "DirectedPoint",
           "Endpoint", "Nart", "Token", "TokenBufferPool", "dm_pack", "dm_unpack"]
