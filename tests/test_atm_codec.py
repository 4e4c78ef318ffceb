"""ATM codecs: AAL5's CRC-32, the header HEC, AAL5 framing into cells.

AAL5's CRC-32 has Ethernet's generator but is computed MSB first (ITU-T I.363.5), so it
is checked three ways: the catalogued check value of that CRC ("CRC-32/BZIP2"), the
AAL5 test PDUs printed in I.363.5's appendix and quoted widely, and zlib's reflected
CRC-32 (same polynomial) applied to bit-reversed input, for arbitrary data.
"""
from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings, strategies as st

from nic_drivers.atm import _model as hw

REV8 = bytes(int(f"{b:08b}"[::-1], 2) for b in range(256))


def reflect32(x: int) -> int:
    return int(f"{x:032b}"[::-1], 2)


def test_crc32_check_value():
    assert hw.aal5_crc32(b"123456789") == 0xFC891918


@pytest.mark.parametrize("payload,crc", [
    (bytes(40), 0x864D7F99),
    (b"\xff" * 40, 0xC55E457A),
    (bytes(range(1, 41)), 0xBF671ED0),
])
def test_aal5_reference_pdus(payload, crc):
    cells = hw.aal5_cells(0, 32, payload)
    assert len(cells) == 53                          # 40 + 8 = 48: one cell, no pad
    trailer = cells[5 + 40:5 + 48]
    assert trailer[:4] == bytes([0, 0, 0, 40])       # UU, CPI, length
    assert int.from_bytes(trailer[4:], "big") == crc


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_crc32_is_zlibs_polynomial_unreflected(data):
    via_zlib = reflect32(zlib.crc32(data.translate(REV8))) if data else 0
    assert hw.aal5_crc32(data) == via_zlib


def test_zlibs_reflected_crc_is_not_aal5s():
    assert zlib.crc32(b"123456789") == 0xCBF43926 != hw.aal5_crc32(b"123456789")


def test_hec_of_the_idle_cell():
    # ITU-T I.432: the idle cell header is 00 00 00 01 with HEC 0x52.
    assert hw.hec(bytes([0, 0, 0, 1])) == 0x52
    assert hw.cell_header(0, 0, 0, 1) == bytes([0, 0, 0, 1, 0x52])


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=4, max_size=4), st.integers(0, 39))
def test_hec_catches_every_single_bit_error(header, bit):
    good = hw.hec(header)
    bad = bytearray(header + bytes([good]))
    bad[bit // 8] ^= 1 << (bit % 8)
    assert hw.hec(bytes(bad[:4])) != bad[4]


def test_cell_header_layout():
    h = hw.cell_header(vpi=0x5A, vci=0x1234, pti=1, clp=1, gfc=0x3)
    word = int.from_bytes(h[:4], "big")
    assert word >> 28 == 0x3 and (word >> 20) & 0xFF == 0x5A and (word >> 4) & 0xFFFF == 0x1234
    assert (word >> 1) & 7 == 1 and word & 1 == 1
    assert h[4] == hw.hec(h[:4])


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=2000))
def test_aal5_framing(payload):
    cells = hw.aal5_cells(0, 40, payload)
    n = len(cells) // 53
    assert len(cells) % 53 == 0 and n == hw.aal5_cell_count(len(payload))
    pdu = b"".join(cells[i * 53 + 5:(i + 1) * 53] for i in range(n))
    assert 0 <= len(pdu) - len(payload) - 8 <= 47                 # pad 0..47
    assert pdu[:len(payload)] == payload
    assert int.from_bytes(pdu[-6:-4], "big") == len(payload)
    assert int.from_bytes(pdu[-4:], "big") == hw.aal5_crc32(pdu[:-4])
    for i in range(n):                                             # only the last cell ends the PDU
        pti = (cells[i * 53 + 3] >> 1) & 7
        assert pti == (1 if i == n - 1 else 0)


def test_cell_count_steps_every_48_bytes():
    assert [hw.aal5_cell_count(n) for n in (0, 40, 41, 88, 89)] == [1, 1, 2, 2, 3]
