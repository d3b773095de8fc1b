"""tunebench/bounds.py: a Range's verdict on a value and its description, as messages, `--help` and the docs say
them."""

import math

import pytest

from tunebench.bounds import COUNT, SECONDS, Range


@pytest.mark.parametrize("allowed, value, ok", [
    (Range(1, 10), 1, True), (Range(1, 10), 10, True), (Range(1, 10), 0, False), (Range(1, 10), 11, False),
    (Range(0, 1, low_open=True), 0, False), (Range(0, 1, high_open=True), 1, False), (Range(0, 1), 0.5, True),
    (Range(1), math.nan, False), (Range(), math.inf, False), (Range(), -math.inf, False), (Range(), 10**400, True),
    (Range(1, 10, also=(-1,)), -1, True), (Range(1, 10), None, True), (Range(1, 10), True, True),
    (Range(1, 10), "7", True),  # not a number: a type check's to refuse, not the range's
])
def test_a_range_judges_bounds_open_ends_exceptions_and_non_finite_values(allowed, value, ok):
    assert (allowed.problem(value) is None) is ok


def test_a_range_says_itself_the_same_way_everywhere():
    assert Range(0, 1, low_open=True).describe() == "> 0 and <= 1"
    assert Range(1, 2**20).describe() == ">= 1 and <= 1,048,576"
    assert Range(0.5, high_open=True).describe() == ">= 0.5"
    assert Range().describe() == "a finite number"
    assert Range(1, 10, also=(-1,)).describe() == ">= 1 and <= 10 (or -1)"
    assert Range(1, 10).problem(11) == "11 is out of range: expected >= 1 and <= 10"
    assert SECONDS.problem(0) and SECONDS.problem(30 * 24 * 3600) is None and SECONDS.problem(30 * 24 * 3600 + 1)
    assert COUNT.problem(2**20) is None and COUNT.problem(2**20 + 1)
