"""`make reliability`'s exit status: a skipped check fails it (pure: junit elements by hand)."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from reliability_report import exit_status  # noqa: E402


def _case(name: str, child: str = "") -> ET.Element:
    return ET.fromstring(f'<testcase classname="tests.e2e.test_deployed" name="{name}">{child}</testcase>')


def test_a_skipped_check_fails_a_run_pytest_passed():
    cases = [_case("test_a[local]"), _case("test_a[celery]", '<skipped message="redis-server not installed"/>')]
    assert exit_status(cases, 0) == 1


def test_passes_and_known_gaps_keep_pytests_status():
    known_gap = '<skipped type="pytest.xfail" message="Airflow masks no extra"/>'
    assert exit_status([_case("test_a[local]"), _case("test_b", known_gap)], 0) == 0
    assert exit_status([_case("test_a[local]", '<failure message="x"/>')], 1) == 1
