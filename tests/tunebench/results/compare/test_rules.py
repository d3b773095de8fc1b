"""tunebench/results/compare/rules.py: figures as a reader writes them (issue AD: `1.126e+04` in the report)."""

from __future__ import annotations

import math

import pytest

from tunebench.results.compare.rules import format_value, plain_number


@pytest.mark.parametrize("value, digits, shown", [
    (11260.0, 4, "11,260"), (1126000.0, 4, "1,126,000"), (1e12, 4, "1,000,000,000,000"), (42.0, 4, "42"),
    (123.456, 4, "123.5"), (0.01234, 4, "0.01234"), (1.5e-5, 4, "1.5e-05"), (0.0, 4, "0"), (-2500.5, 4, "-2,500"),
    (8000.0, 6, "8,000"), (12.3456789, 6, "12.3457"), (math.nan, 4, ""), (math.inf, 4, ""),
])
def test_plain_numbers_have_no_exponent_where_a_place_value_reads(value, digits, shown):
    assert plain_number(value, digits) == shown


def test_counts_and_tokens_in_the_report_read_as_numbers():
    assert format_value("loss_target_tokens", 11260.0) == "11,260"
    assert format_value("train_model_flops", 3.2e15) == "3,200.0 TFLOP"
    assert format_value("steady_step_time_median", 0.25) == "250.00 ms"  # units keep their own form
