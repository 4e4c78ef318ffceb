"""The modeled benchmarks whose outputs are pinned: every NIC, platform and AM operation.

Each case is the argument list of one ``dp`` command that prints one JSON document.
``python -m tests.golden.record`` runs them all and writes ``tests/golden/<name>.json``;
``tests/test_golden.py`` runs them again and asserts the results are the same. A
deliberate change of the model re-records the affected files in the same commit and
says why in its message.

What is compared: the ``results`` of each document (and the echoed parameters), not
``--stats``: statistics such as engine events per round trip are what a speed-up is
allowed to change.
"""
from __future__ import annotations

TB2_DP_SIZES = "1,2,4,8,16,32,64,128,216"      # DP over the TB2 carries at most 216 bytes

CASES: dict[str, list[str]] = {
    # DP on each NIC and platform
    "pingpong_p133_dec21140": ["pingpong"],
    "bandwidth_p133_dec21140": ["bandwidth"],
    "pingpong_p133_atm": ["pingpong", "--nic", "atm"],
    "bandwidth_p133_atm": ["bandwidth", "--nic", "atm"],
    "pingpong_ppro200_lanai4": ["pingpong", "--nic", "myrinet"],
    "bandwidth_ppro200_lanai4": ["bandwidth", "--nic", "myrinet"],
    "pingpong_p3_1000_lanai9": ["pingpong", "--nic", "myrinet", "--platform", "p3_1000_lanai9"],
    "bandwidth_p3_1000_lanai9": ["bandwidth", "--nic", "myrinet", "--platform", "p3_1000_lanai9"],
    "pingpong_athlon550_lanai4": ["pingpong", "--nic", "myrinet", "--platform", "athlon550_lanai4"],
    "bandwidth_athlon550_lanai4": ["bandwidth", "--nic", "myrinet", "--platform", "athlon550_lanai4"],
    "pingpong_sp_thin_tb2": ["pingpong", "--nic", "tb2", "--sizes", TB2_DP_SIZES],
    "bandwidth_sp_thin_tb2": ["bandwidth", "--nic", "tb2", "--sizes", TB2_DP_SIZES],
    # The NICs' own variants
    "pingpong_sp_thin_tb2_raw": ["pingpong", "--nic", "tb2", "--raw"],
    "bandwidth_ppro200_epos_adaptive": ["bandwidth", "--nic", "myrinet", "--pipeline", "adaptive"],
    "bandwidth_athlon550_epos_adaptive": ["bandwidth", "--nic", "myrinet", "--pipeline", "adaptive",
                                          "--platform", "athlon550_lanai4"],
    "bandwidth_athlon550_epos_fixed4096": ["bandwidth", "--nic", "myrinet", "--pipeline", "fixed:4096",
                                           "--platform", "athlon550_lanai4"],
    # Faults: the seeded injector and the lossy-medium paths of the benchmarks
    "pingpong_p133_faults": ["pingpong", "--sizes", "1,1500", "--iters", "200", "--param", "fault.loss=0.02",
                             "--param", "fault.corrupt=0.01", "--seed", "7"],
    # Active Messages on the SP
    "am_pingpong": ["am-pingpong"],
    "am_bandwidth_store_async": ["am-bandwidth", "--op", "store", "--mode", "async"],
    "am_bandwidth_store_blocking": ["am-bandwidth", "--op", "store", "--mode", "blocking"],
    "am_bandwidth_get_async": ["am-bandwidth", "--op", "get", "--mode", "async"],
    "am_bandwidth_get_blocking": ["am-bandwidth", "--op", "get", "--mode", "blocking"],
    "am_bandwidth_window": ["am-bandwidth", "--window", "16", "--sizes", "16,256,4096", "--iters", "2"],
    # Fast Messages (HPVM 1.9) on Myrinet and shared memory; FM 2.1's machine; the LPR unpaced
    "fm_pingpong_hpvm19": ["fm-pingpong", "--iters", "200"],
    "fm_bandwidth_hpvm19": ["fm-bandwidth"],
    "fm_pingpong_hpvm19_pci": ["fm-pingpong", "--iters", "200", "--notify", "pci", "--sizes", "0,64,1024"],
    "fm_pingpong_hpvm19_smt": ["fm-pingpong", "--iters", "200", "--transport", "smt"],
    "fm_pingpong_pii300_fm21": ["fm-pingpong", "--iters", "200", "--platform", "pii300_lanai4", "--notify", "pci",
                                "--pacing", "off", "--sizes", "0,64,1024"],
    "fm_bandwidth_lpr_unpaced": ["fm-bandwidth", "--platform", "lpr_lanai4", "--pacing", "off"],
    # LCI on Myrinet: point to point, LogP, fetch-and-add on 64 nodes, and every multicast
    # variant on 16 nodes (the receivers' poll loops are what kernelsim._spin runs)
    "lci_pingpong": ["lci-pingpong"],
    "lci_bandwidth": ["lci-bandwidth"],
    "lci_logp": ["lci-logp"],
    "lci_fa": ["lci-fa"],
    "lci_bcast_16": ["lci-bcast", "--nodes", "16", "--variant", "all", "--sizes", "16,4096,65536", "--iters", "2"],
}


def run_case(argv: list[str]) -> dict:
    """Run ``dp ARGV --json`` in this process and return its document."""
    import contextlib
    import io
    import json

    from libdp._cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main([*argv, "--json"])
    if rc != 0:
        raise RuntimeError(f"dp {' '.join(argv)} exited {rc}")
    return json.loads(out.getvalue())


def pinned(doc: dict) -> dict:
    """The part of a document the golden file pins (not the statistics, not the layout's
    version number: a layout change that keeps the figures keeps the golden files)."""
    return {k: v for k, v in doc.items() if k not in ("stats", "schema_version")}
