"""Every deployed test gets a hang guard sized for a deployment on a shared, loaded machine, and
runs on the pytest-xdist worker of its deployment.

pytest-timeout's project default (300 s, pyproject) is for in-process tests. A deployed test
starts PostgreSQL and five Airflow processes and stops them again; on a 2-core machine under
load that alone took more than 300 s (the Chromium UI test failed in its teardown so), which is
a hang guard misread as a speed limit. A test that names its own timeout keeps it.

The deployed run (tests/suite.py) runs on two xdist workers with ``--dist loadgroup``: the tests
mostly wait on Airflow's scheduler and the emulator, so two deployments side by side nearly halve
it. A deployment is a module-scoped fixture, one per file and executor: every test of one
(``test_deployed.py`` on ``celery``, ...) is in one ``xdist_group`` so the deployment starts once,
on one worker. The groups are handed out longest first (:data:`GROUP_SECONDS`), so that the two
workers end near each other. What each worker starts is its own: free ports, a PostgreSQL
cluster per deployment (a unique name), its own Redis, emulator and ``tmp_path`` (docs/testing.md).
"""

from __future__ import annotations

import pytest

DEPLOYED_HANG_GUARD_SECONDS = 1800

# Seconds per deployment group (setup, calls and teardown; --durations of the deployed run on
# 2 workers, 2026-12-05, load 6-23, docs/testing.md): only the order matters, the longest first. A group not
# listed goes after the listed ones, in collection order.
GROUP_SECONDS = {
    "test_deployed-celery": 868,
    "test_deployed-local": 845,
    "test_security": 226,
    "test_reaper-local": 212,
    "test_reaper-celery": 201,
    "test_races": 200,
    "test_budget-celery": 199,
    "test_budget-local": 171,
    "test_ui_plugin": 140,
    "test_stop": 122,
    "test_secret_variable-celery": 115,
    "test_secret_variable-local": 110,
    "test_secret_printed": 81,
}


def deployment_group(item: pytest.Item) -> str:
    """``<file>-<executor>``: the file and the parameters of its module-scoped fixtures (the
    deployment's executor), i.e. one deployment; function-scoped parameters share it."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    definitions = item._fixtureinfo.name2fixturedefs  # type: ignore[attr-defined]
    module_params = [str(value) for name, value in params.items()
                     if name in definitions and definitions[name][-1].scope == "module"]
    return "-".join([item.path.stem, *module_params])


def _deployed(item: pytest.Item) -> bool:
    return "/e2e/" in str(item.fspath)


@pytest.hookimpl(trylast=True)  # after pytest's own ordering by module-scoped parameters
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    slots = [i for i, item in enumerate(items) if _deployed(item)]
    deployed = [items[i] for i in slots]
    for item in deployed:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEPLOYED_HANG_GUARD_SECONDS))
        item.add_marker(pytest.mark.xdist_group(deployment_group(item)))
    # the longest groups first; sorted() is stable: a group's tests keep pytest's order
    deployed.sort(key=lambda item: -GROUP_SECONDS.get(deployment_group(item), 0))
    for i, item in zip(slots, deployed):
        items[i] = item
