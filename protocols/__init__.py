"""Loadable protocol modules: the kernel and NI halves of AM, FM and LCI.

Each protocol is a package here exporting ``MODULE`` (a `kernelsim.Module`), loaded
with ``insmod NAME`` or ``--load NAME``; its user half lives in `libdp`.
"""
