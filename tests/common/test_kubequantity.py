"""common/protocol/kubequantity.py: the port of the kubernetes client's parse_quantity answers
every input as the client does (the same Decimal, or the same error), so requests, quotas and
DRA capacities read a quantity as before."""

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils.quantity import parse_quantity as client_parse_quantity

from hami_dcu.common.protocol.kubequantity import parse_quantity

SUFFIXES = ["", "n", "u", "m", "k", "K", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "ki", "i",
            "mi", "ni", "x", "Ki "]


def outcome(parse, value):
    """What a parser makes of `value`: ("value", its exact text) or ("error", the error's class)."""
    try:
        result = parse(value)
    except Exception as exc:  # any error: its class is what is compared
        return "error", type(exc)
    return "value", (type(result), str(result))


CASES = ["1", "0", "-1", "2k", "1Ki", "3e3", "1.5", "500m", "65520Mi", "8Gi", "1E", "1Ei", "1ki", "1K", "",
         "i", "Mi", "Ki", "abc", "NaN", "sNaN", "Infinity", "-Inf", "1e99999999999", "1e99999999999Ei",
         "sNaNk", "NaNMi", " 1", "1 ", "0x10", "1_000", "١٢", "1e-7n", "+5", "2.Ki", ".5k"]


@pytest.mark.parametrize("value", [*CASES, 0, 7, -3, 2.5, Decimal("1.25")])
def test_each_listed_input_reads_as_the_client_reads_it(value):
    assert outcome(parse_quantity, value) == outcome(client_parse_quantity, value)


@given(st.tuples(st.text(alphabet="0123456789.eE+-_ aINnfs", max_size=12), st.sampled_from(SUFFIXES))
       .map("".join))
def test_any_number_and_suffix_reads_as_the_client_reads_it(value):
    assert outcome(parse_quantity, value) == outcome(client_parse_quantity, value)


@given(st.text(max_size=16))
def test_any_text_reads_as_the_client_reads_it(value):
    assert outcome(parse_quantity, value) == outcome(client_parse_quantity, value)
