"""infoeval.quant.schemes: the scheme-name grammar, its error messages and the integer ranges it implies."""

from __future__ import annotations

import pytest

from infoeval.errors import EXIT_USAGE, SchemeError
from infoeval.quant.schemes import DEFAULT_SCHEMES, Scheme, parse_scheme
from infoeval.quant.variant_settings import parse_schemes


@pytest.mark.parametrize(
    "text,bits,group,sym",
    [
        ("int8-channel", 8, None, True),
        ("int4-g128", 4, 128, True),
        ("int4-channel", 4, None, True),
        ("int3-g64-asym", 3, 64, False),
        ("INT4-G128", 4, 128, True),
        ("Int3-G64-ASYM", 3, 64, False),
        ("int4-g128-sym", 4, 128, True),
        ("  int2-g4  ", 2, 4, True),
        ("int8-g4096-asym", 8, 4096, False),
        ("int5-channel-asym", 5, None, False),
    ],
)
def test_parse_accepts(text, bits, group, sym):
    """Valid names parse to the bits / group size / symmetry the grammar says."""
    s = parse_scheme(text)
    assert (s.bits, s.group_size, s.symmetric) == (bits, group, sym)


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("int1-channel", "bits must be 2 to 8"),
        ("int9-g128", "bits must be 2 to 8"),
        ("int0-channel", "bits must be 2 to 8"),
        ("int16-channel", "bits must be 2 to 8"),
        ("int4-g2", "too small"),
        ("int4-g0", "too small"),
        ("int4-g3", "too small"),
        ("garbage", "allowed"),
        ("", "allowed"),
        ("int4", "allowed"),
        ("int4-g", "allowed"),
        ("int4-g-128", "allowed"),
        ("int4-channel-asym-sym", "allowed"),
        ("fp8-channel", "allowed"),
        ("int4-g128x", "did you mean 'int4-g128'"),
        ("in4-g128", "did you mean 'int4-g128'"),
        ("int8-chanel", "did you mean 'int8-channel'"),
        ("int3-g64-asymm", "did you mean 'int3-g64-asym'"),
    ],
)
def test_parse_rejects_with_one_line_message(text, fragment):
    """Invalid names raise SchemeError (a usage error, exit 2) with a one-line message naming the problem."""
    with pytest.raises(SchemeError) as e:
        parse_scheme(text)
    msg = str(e.value)
    assert "\n" not in msg
    assert fragment in msg
    assert e.value.exit_code == EXIT_USAGE


def test_garbage_gets_no_misleading_hint():
    """A name far from every known scheme gets the allowed forms but no 'did you mean'."""
    with pytest.raises(SchemeError) as e:
        parse_scheme("banana")
    assert "did you mean" not in str(e.value)
    assert "int8-channel" in str(e.value)


@pytest.mark.parametrize("bits", range(2, 9))
def test_qmin_qmax(bits):
    """Symmetric: restricted range ±(2^(b−1)−1); asymmetric: 0 … 2^b−1."""
    sym = parse_scheme(f"int{bits}-channel")
    asym = parse_scheme(f"int{bits}-channel-asym")
    assert (sym.qmin, sym.qmax) == (-(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1)
    assert (asym.qmin, asym.qmax) == (0, 2**bits - 1)
    assert sym.qmin == -sym.qmax  # restricted: the grid is symmetric around 0


def test_known_ranges():
    """The familiar numbers: int8 −127…127, int4 −7…7, int3-asym 0…7."""
    assert (parse_scheme("int8-channel").qmin, parse_scheme("int8-channel").qmax) == (-127, 127)
    assert (parse_scheme("int4-g128").qmin, parse_scheme("int4-g128").qmax) == (-7, 7)
    assert (parse_scheme("int3-g64-asym").qmin, parse_scheme("int3-g64-asym").qmax) == (0, 7)


@pytest.mark.parametrize("name", ["int8-channel", "int4-g128", "int3-g64-asym", "int2-g4", "int6-channel-asym"])
def test_name_round_trip(name):
    """parse(name).name == name and parse(s.name) == s (the canonical spelling drops '-sym')."""
    s = parse_scheme(name)
    assert s.name == name
    assert parse_scheme(s.name) == s
    assert parse_scheme(name.upper()) == s


def test_sym_suffix_is_canonicalised():
    """'-sym' is the default and is not part of the canonical name."""
    assert parse_scheme("int4-g128-sym").name == "int4-g128"


def test_as_dict_and_granularity():
    """as_dict carries the same numbers as the properties; granularity spells the block shape."""
    s = parse_scheme("int3-g64-asym")
    d = s.as_dict()
    assert d == {
        "name": "int3-g64-asym",
        "bits": 3,
        "group_size": 64,
        "symmetric": False,
        "qmin": 0,
        "qmax": 7,
        "rounding": "round-half-to-even",
    }
    assert s.granularity == "per-group(64)"
    assert parse_scheme("int8-channel").granularity == "per-channel"
    assert Scheme(8, None).name == "int8-channel"


def test_parse_schemes_default_list():
    """The default list parses to three distinct schemes in order."""
    names = [s.name for s in parse_schemes(DEFAULT_SCHEMES)]
    assert names == ["int8-channel", "int4-g128", "int4-channel"]


def test_parse_schemes_whitespace_and_empty_items():
    """Spaces around items and empty items between commas are ignored."""
    got = parse_schemes(" int8-channel , ,int4-g128,")
    assert [s.name for s in got] == ["int8-channel", "int4-g128"]


@pytest.mark.parametrize("text", ["", "   ", ",", " , ,"])
def test_parse_schemes_empty(text):
    """An empty list is a SchemeError with a one-line message."""
    with pytest.raises(SchemeError) as e:
        parse_schemes(text)
    assert "\n" not in str(e.value)
    assert "no quantization scheme" in str(e.value)


@pytest.mark.parametrize(
    "text,dupe",
    [
        ("int4-g128,int4-g128", "int4-g128"),
        ("int4-g128,INT4-G128", "int4-g128"),
        ("int4-g128-sym,int8-channel,int4-g128", "int4-g128"),
    ],
)
def test_parse_schemes_duplicates(text, dupe):
    """The same scheme twice (after canonicalisation) is rejected, naming it."""
    with pytest.raises(SchemeError) as e:
        parse_schemes(text)
    assert "listed twice" in str(e.value)
    assert dupe in str(e.value)
    assert "\n" not in str(e.value)


def test_parse_schemes_propagates_bad_item():
    """One bad item in a list fails the whole list with that item's message."""
    with pytest.raises(SchemeError, match="int4-g2"):
        parse_schemes("int8-channel,int4-g2")
