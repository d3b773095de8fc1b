"""One typed vocabulary per idea (tunebench.vocabulary): members are their plain text wherever they are written,
a misspelt word fails where it is declared, and every family and direction the registry uses is judged by compare."""

import json

import pandas as pd
import pytest

from tunebench.results.columns.registry import REGISTRY
from tunebench.results.columns.types import METRIC, S_STEADY, Column
from tunebench.results.compare.rules import DEFAULT_RULES, rule_for
from tunebench.vocabulary import Direction, Executor, MetricFamily, Objective, Status


def test_a_word_is_its_text_in_json_csv_and_messages(tmp_path):
    assert Status.OK == "ok" and f"{Status.OOM}" == "oom" and str(Direction.IGNORE) == "ignore"
    assert json.dumps({"status": Status.TIMEOUT}) == '{"status": "timeout"}'
    pd.DataFrame([{"status": Status.SKIPPED}]).to_csv(tmp_path / "x.csv", index=False)
    assert (tmp_path / "x.csv").read_text().splitlines() == ["status", "skipped"]
    assert Executor.parse("ray") is Executor.RAY and Objective.parse("cost") is Objective.COST


def test_a_word_that_is_none_of_them_is_named_with_the_allowed_ones():
    with pytest.raises(ValueError, match="status must be one of ok, oom, error, timeout, skipped, dry_run, got 'okay'"):
        Status.parse("okay")


def test_a_misspelt_family_or_direction_fails_where_the_column_is_declared():
    with pytest.raises(ValueError, match="column x: family must be one of throughput"):
        Column("x", METRIC, "s", "a time", S_STEADY, Direction.HIGHER_IS_WORSE, "thruput")
    with pytest.raises(ValueError, match="column x: direction must be one of"):
        Column("x", METRIC, "s", "a time", S_STEADY, "higher", MetricFamily.TIME)


def test_every_family_has_a_rule_and_every_metric_a_family_and_direction():
    assert set(DEFAULT_RULES) == set(MetricFamily)
    for column in REGISTRY:
        assert isinstance(column.direction, Direction), column.name
        assert column.family is None or isinstance(column.family, MetricFamily), column.name
        if column.family is None and column.pattern is None:  # text, or a figure compare does not judge
            assert rule_for(column.name) is None, column.name


def test_the_registry_direction_is_the_one_compare_judges_by():
    # No translation table between two vocabularies: the column's own Direction is the rule's.
    assert rule_for("steady_tokens_per_second").direction is Direction.LOWER_IS_WORSE
    assert rule_for("scan_mem_peak_allocated").direction is Direction.HIGHER_IS_WORSE
    assert rule_for("train_loss").direction is Direction.TWO_SIDED
    assert rule_for("scan_init_time").direction is Direction.IGNORE  # startup: informational until asked
    assert rule_for("steady_tokens_per_second", directions={"throughput": "ignore"}).direction is Direction.IGNORE
