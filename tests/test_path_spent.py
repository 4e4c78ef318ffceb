"""Paths that spend their segments in place (`kernelsim._path.spent`).

The 21140's, Myrinet's and the TB2's driver paths ask the CPU walking them whether a segment is
over already instead of yielding it up through the paths they run in. Run inside a
Python generator (which need not pass their yields through), they get no walker and
yield every segment: the modeled figures must be the same either way, to the bit.
"""
import pytest

from libdp import Cluster, pingpong


def _rows(nic, wrapped):
    c = Cluster(nodes=2, nic=nic)
    if wrapped:
        for node in c.nodes:
            for nd in node.netdevs.values():
                if nd.irq_line < 0:
                    continue
                node.irq.free_irq(nd.irq_line, nd.name)

                def handler(pending, nd=nd):
                    return (yield from nd.interrupt_path(pending))

                node.irq.request_irq(nd.irq_line, handler, nd.name)
    return c.run_spmd(pingpong, [1, 100], 50, 0)


@pytest.mark.parametrize("nic", ["dec21140", "myrinet"])
def test_an_interrupt_path_run_by_a_generator_models_the_same_round_trips(nic):
    assert _rows(nic, True) == _rows(nic, False)


def test_a_path_iterated_by_python_outside_any_walk_yields_its_segments():
    c = Cluster(nodes=2, nic="dec21140")
    nd = c.nodes[0].netdevs["eth0"]
    # Nothing pending on the card: the handler reads CSR5 (one PCI read) and returns.
    costs = list(nd.interrupt_path(0.0))
    assert costs == [c.nodes[0].costs.pci_read]


def test_the_tb2_interrupt_path_run_by_a_generator_models_the_same_round_trips():
    # The TB2 driver's interrupt path and commit ask too (session 35).
    assert _rows("tb2", True) == _rows("tb2", False)
