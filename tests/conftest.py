"""Shared fixtures for the foundation tests.

* ``cluster``      -- two modeled P-133 nodes with DEC 21140s back to back, DP loaded.
* ``model_clock``  -- that cluster's trio clock (``EngineClock``); an async test that
  asks for it runs in the cluster's modeled time (pytest-trio passes a requested
  Clock fixture to ``trio.run``).
* ``modeled``      -- the cluster, with ``EngineClock.drive`` running in the
  background for the length of an async test (what ``Cluster.run`` does).

Async tests must request both ``modeled`` and ``model_clock``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from libdp import Cluster  # noqa: E402


@pytest.fixture
def cluster():
    return Cluster(nodes=2, platform="p133", seed=0)


@pytest.fixture
def model_clock(cluster):
    return cluster.clock


@pytest.fixture
async def modeled(cluster, model_clock):
    async with trio.open_nursery() as nursery:
        nursery.start_soon(model_clock.drive)
        yield cluster
        nursery.cancel_scope.cancel()
