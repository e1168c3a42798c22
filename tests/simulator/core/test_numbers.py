"""The one grammar and bound check every data file's numbers are read with
(simulator/core/numbers.py): plain ASCII decimals, as pandas reads the request traces; what
Python's int() and float() take beyond them is refused."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagesim.simulator.core.limits import TOKENS
from pagesim.simulator.core.numbers import Range, as_number, column_numbers, parse_decimal

DECIMALS = st.from_regex(
    r"\A ?[+-]?([0-9]{1,12}(\.[0-9]{0,6})?|\.[0-9]{1,6})([eE][+-]?[0-9]{1,2})? ?\Z"
)


@given(DECIMALS)
def test_a_plain_decimal_reads_as_pandas_reads_it(text: str) -> None:
    number = parse_decimal(text)
    assert number == float(text)
    by_pandas = float(pd.to_numeric(pd.Series([text], dtype=object)).iloc[0])
    assert by_pandas == pytest.approx(number, rel=1e-15)


@given(DECIMALS, st.sampled_from(["_", "\u0661", "\u0967", "x", ","]))
def test_what_python_reads_beyond_the_grammar_is_not_a_number(text: str, odd: str) -> None:
    cut = len(text) // 2 + 1
    assert parse_decimal(text[:cut] + odd + text[cut:]) is None


@pytest.mark.parametrize(
    "text", ["1_0", "\u0661", "\u0661\u0660", "inf", "nan", "Infinity", "0x10", "", "1e", "--1"]
)
def test_int_and_float_texts_that_are_not_numbers_in_a_data_file(text: str) -> None:
    assert parse_decimal(text) is None
    assert column_numbers(np.array([text], dtype=object)).tolist() != [1.0]


def test_a_column_pandas_parsed_is_taken_as_is_and_a_text_column_cell_by_cell() -> None:
    assert column_numbers(np.array([1, 2], dtype=np.int64)).tolist() == [1.0, 2.0]
    parsed = column_numbers(np.array(["1", "1_0", " 2.5e1 ", None, True], dtype=object))
    assert parsed[0] == 1.0 and parsed[2] == 25.0
    assert all(math.isnan(x) for x in parsed[[1, 3, 4]])


@given(
    st.one_of(
        st.integers(min_value=-(10**400), max_value=10**400),
        st.floats(allow_nan=True, allow_infinity=True),
        DECIMALS,
        st.booleans(),
    )
)
def test_take_and_outside_agree_and_hold_the_bounds(value: object) -> None:
    for allowed in (TOKENS, Range(0, 60_000, lo_open=True, unit="ms"), Range(0, math.inf)):
        taken = allowed.take(value)
        number = as_number(value)
        column = np.array([math.nan if number is None else number])
        assert (taken is None) == bool(allowed.outside(column)[0])
        if taken is not None:
            assert math.isfinite(taken) and allowed.lo <= taken <= allowed.hi
            assert not (allowed.lo_open and taken == allowed.lo)
            assert not allowed.whole or taken.is_integer()


def test_ranges_describe_themselves_for_the_message() -> None:
    assert TOKENS.describe() == "a whole number of tokens from 1 to 1,000,000,000"
    assert Range(0, 60_000, lo_open=True, unit="ms").describe() == (
        "a finite number of ms above 0, up to 60,000"
    )
    assert Range(0, math.inf, unit="seconds").describe() == "a finite number of seconds >= 0"
