"""The suite's worker groups (tests/fixtures/parallel.py): under `--dist loadgroup` a test whose module shares a fixture
runs in its module's group, and the pytest installed lets pytest-xdist write the groups at all (pytest 9.2 does not:
pytest-dev/pytest-xdist#1386, where the suite refuses to start instead of spreading the groups silently)."""

import pytest

from tests.fixtures import parallel


@pytest.fixture(scope="module")
def shared():
    return object()


def test_the_installed_pytest_takes_the_groups_xdist_writes(request):
    if getattr(request.config, "workerinput", None) is None:
        pytest.skip("one process (-n 0): no groups to take")
    assert parallel._node_ids_take_groups(), parallel._groups_lost()


def test_a_test_sharing_a_module_fixture_runs_in_its_module_s_group(request, shared):
    if getattr(request.config, "workerinput", None) is None or not request.config.option.loadgroup:
        pytest.skip("not on a pytest-xdist worker under --dist loadgroup (-n 0)")
    assert request.node.nodeid == "tests/test_worker_groups.py::" \
        "test_a_test_sharing_a_module_fixture_runs_in_its_module_s_group@tests/test_worker_groups.py"


def test_the_refusal_names_the_cause_and_the_way_out():
    message = parallel._groups_lost("tests/x.py::test_y")
    assert "tests/x.py::test_y has none" in message and "pytest<9.2" in message and "-n 0" in message
