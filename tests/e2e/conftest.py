"""Every deployed test gets a hang guard sized for a deployment on a shared, loaded machine.

pytest-timeout's project default (300 s, pyproject) is for in-process tests. A deployed test
starts PostgreSQL and five Airflow processes and stops them again; on a 2-core machine under
load that alone took more than 300 s (the Chromium UI test failed in its teardown so), which is
a hang guard misread as a speed limit. A test that names its own timeout keeps it.
"""

from __future__ import annotations

import pytest

DEPLOYED_HANG_GUARD_SECONDS = 1800


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/e2e/" in str(item.fspath) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEPLOYED_HANG_GUARD_SECONDS))
