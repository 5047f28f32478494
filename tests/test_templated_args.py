"""timeout, deadline, expected_run_time, poll_interval and prices are templated fields: a literal
is checked when the DAG is parsed, a template once rendered (same rules, same field names),
before any GPU is requested. Through ``dag.test()`` against the emulator."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import requests

from airflow_gpu_sched.orchestration import templated_args
from airflow_gpu_sched.orchestration.errors import InvalidTrainingSpec
from tests.airflow_harness import run_dag
from tests.conftest import LOCATION, PROJECT

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
A100 = dict(image_uri="gcr.io/p/trainer:1", machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100",
            accelerator_count=1)
PRICES = {"currency": "USD", "NVIDIA_TESLA_A100": {"FLEX_START": 1.0, "SPOT": 1.5, "STANDARD": 3.0}}
TEMPLATED = dict(timeout="{{ params.timeout }}", deadline="{{ params.deadline }}",
                 expected_run_time="{{ params.run }}", poll_interval="{{ params.poll }}",
                 prices="{{ params.prices | tojson }}")
GOOD = {"timeout": "2h", "deadline": "12h", "run": "30m", "poll": "0.02", "prices": PRICES}


@pytest.mark.parametrize("values, parsed", [
    ({"timeout": "90m"}, {"timeout": timedelta(minutes=90)}),
    ({"deadline": "6h"}, {"deadline": timedelta(hours=6)}),
    ({"deadline": "2026-01-02T06:00:00Z"}, {"deadline": datetime(2026, 1, 2, 6, tzinfo=timezone.utc)}),
    ({"deadline": "2026-01-02T06:00:00"}, {"deadline": datetime(2026, 1, 2, 6, tzinfo=timezone.utc)}),
    ({"poll_interval": "15"}, {"poll_interval": 15.0}),
    ({"prices": '{"currency": "USD"}'}, {"prices": {"currency": "USD"}}),
    ({"prices": "catalog:gpu_prices"}, {"prices": "catalog:gpu_prices"}),
])
def test_rendered_text_is_read_as_the_literal_would_be(values, parsed):
    assert templated_args.parse(values, keep_templates=False) == parsed


def test_at_dag_parse_a_template_stays_text_and_every_bad_literal_is_named():
    assert templated_args.parse({"deadline": "{{ params.d }}"}, keep_templates=True) == {"deadline": "{{ params.d }}"}
    with pytest.raises(InvalidTrainingSpec) as raised:
        templated_args.parse({"deadline": "tomorrow", "poll_interval": "fast", "timeout": "soon",
                              "prices": "[1, 2]"}, keep_templates=False)
    message = str(raised.value)
    for field in ("deadline", "poll_interval", "timeout", "prices"):
        assert f"{field}: " in message, message
    assert len(raised.value.violations) == 4


@pytest.mark.parametrize("value", [0, -1, "nan", "inf", True, None, "1e999"])
def test_a_poll_interval_must_be_a_positive_finite_number(value):
    with pytest.raises(InvalidTrainingSpec, match="poll_interval"):
        templated_args.poll_interval(value)


def _dag(dag_id: str, params: dict):
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import GpuTrainingOperator

    with DAG(dag_id, schedule=None, start_date=START, params=params) as dag:
        GpuTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, deferrable=False,
                            quota_preflight=False, plan=[{"strategy": "FLEX_START", "max_wait_duration": "1h"}],
                            env={"EMULATOR_RUN_SECONDS": "60"}, **A100, **TEMPLATED)
    return dag


def test_templated_durations_deadline_poll_and_prices_reach_the_job_and_the_result(airflow_db, fast_emulator):
    result = run_dag(_dag("templated_scalars", GOOD), logical_date=START)
    assert result.state == "success", result["train"].state
    value = result["train"].return_value
    job = requests.get(f"{fast_emulator.url}/v1/{value['job_name']}", timeout=5).json()
    assert job["jobSpec"]["scheduling"]["timeout"] == "7200s"  # the rendered timeout
    assert value["currency"] == "USD" and value["cost"] is not None  # the rendered price table was used


@pytest.mark.parametrize("bad, field", [({"poll": "fast"}, "poll_interval"), ({"deadline": "tomorrow"}, "deadline"),
                                        ({"timeout": "soon"}, "timeout"), ({"run": "-"}, "expected_run_time")])
def test_a_bad_rendered_value_fails_naming_its_field_before_any_job(airflow_db, fast_emulator, bad, field):
    result = run_dag(_dag(f"templated_bad_{field}", {**GOOD, **bad}), logical_date=START)
    assert result.state == "failed"
    assert fast_emulator.stats()["jobsCreated"] == {}
    assert result["train"].try_number == 1  # InvalidTrainingSpec: AirflowFailException, no retry helps


def test_a_dag_with_templated_scalars_still_checks_the_rest_of_the_job_when_parsed():
    from airflow_gpu_sched.operators import GpuTrainingOperator

    with pytest.raises(InvalidTrainingSpec, match="acceleratorCount"):
        GpuTrainingOperator(task_id="t", project_id=PROJECT, location=LOCATION, plan=[{"strategy": "STANDARD"}],
                            **{**A100, "accelerator_count": 3}, **TEMPLATED)


# ------------------------------------------------------------------------------ the plan as text

def _plan_dag(dag_id: str, plan, params: dict, searchpath: str | None = None):
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import GpuTrainingOperator

    with DAG(dag_id, schedule=None, start_date=START, params=params,
             template_searchpath=[searchpath] if searchpath else None) as dag:
        GpuTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, deferrable=False,
                            quota_preflight=False, poll_interval=0.02, plan=plan,
                            env={"EMULATOR_RUN_SECONDS": "60"}, **A100)
    return dag


def _strategies(emulator) -> dict:
    return emulator.stats()["jobsCreated"]


def test_a_plan_from_a_template_of_the_whole_plan_runs_its_steps(airflow_db, fast_emulator):
    plan = [{"strategy": "SPOT"}]
    result = run_dag(_plan_dag("plan_from_params", "{{ params.plan | tojson }}", {"plan": plan}),
                     logical_date=START)
    assert result.state == "success", result["train"].state
    assert _strategies(fast_emulator) == {"SPOT": 1}


def test_a_plan_file_is_parsed_first_then_its_values_rendered(airflow_db, fast_emulator, tmp_path):
    (tmp_path / "gpu_plan.yaml").write_text(
        "- strategy: FLEX_START\n  max_wait_duration: '{{ params.wait }}'\n")
    result = run_dag(_plan_dag("plan_from_file", "gpu_plan.yaml", {"wait": "2h"}, str(tmp_path)), logical_date=START)
    assert result.state == "success", result["train"].state
    job = requests.get(f"{fast_emulator.url}/v1/{result['train'].return_value['job_name']}", timeout=5).json()
    assert job["jobSpec"]["scheduling"] == {"strategy": "FLEX_START", "maxWaitDuration": "7200s"}


def test_a_rendered_value_in_a_plan_file_cannot_add_steps(airflow_db, fast_emulator, tmp_path):
    """The file is parsed before rendering: a value that renders to YAML stays one string value."""
    (tmp_path / "gpu_plan.yaml").write_text("- strategy: '{{ params.strategy }}'\n")
    sneaky = "SPOT\n- strategy: STANDARD"
    result = run_dag(_plan_dag("plan_file_sneaky", "gpu_plan.yaml", {"strategy": sneaky}, str(tmp_path)),
                     logical_date=START)
    assert result.state == "failed" and _strategies(fast_emulator) == {}


def test_a_bad_rendered_plan_fails_naming_the_step_before_any_job(airflow_db, fast_emulator):
    result = run_dag(_plan_dag("plan_bad", "{{ params.plan | tojson }}", {"plan": [{"strategy": "CHEAP"}]}),
                     logical_date=START)
    assert result.state == "failed" and result["train"].try_number == 1
    assert _strategies(fast_emulator) == {}


def test_literal_plan_text_is_checked_when_the_dag_is_parsed():
    from airflow_gpu_sched.operators import GpuTrainingOperator

    op = GpuTrainingOperator(task_id="t", project_id=PROJECT, location=LOCATION, plan='[{"strategy": "SPOT"}]', **A100)
    assert [s.strategy for s in op.plan] == ["SPOT"]
    with pytest.raises(InvalidTrainingSpec, match=r"plan\[0\]"):
        GpuTrainingOperator(task_id="t", project_id=PROJECT, location=LOCATION, plan="- strategy: CHEAP\n", **A100)
    with pytest.raises(InvalidTrainingSpec, match="fallback"):
        GpuTrainingOperator(task_id="t", project_id=PROJECT, location=LOCATION, plan="{{ var.value.p }}",
                            fallback=[{"strategy": "STANDARD"}], **A100)
    templated = GpuTrainingOperator(task_id="t", project_id=PROJECT, location=LOCATION, plan="{{ var.value.p }}",
                                    **A100)
    assert templated.plan == [] and templated.plan_spec == "{{ var.value.p }}"  # checked once rendered


def test_a_preset_operators_own_durations_are_templated_into_its_step(airflow_db, fast_emulator):
    from airflow.sdk import DAG

    from airflow_gpu_sched.operators import FlexStartTrainingOperator

    with DAG("preset_templated_wait", schedule=None, start_date=START, params={"wait": "3h"}) as dag:
        FlexStartTrainingOperator(task_id="train", project_id=PROJECT, location=LOCATION, deferrable=False,
                                  quota_preflight=False, poll_interval=0.02, max_wait_duration="{{ params.wait }}",
                                  env={"EMULATOR_RUN_SECONDS": "60"}, **A100)
    result = run_dag(dag, logical_date=START)
    assert result.state == "success", result["train"].state
    job = requests.get(f"{fast_emulator.url}/v1/{result['train'].return_value['job_name']}", timeout=5).json()
    assert job["jobSpec"]["scheduling"] == {"strategy": "FLEX_START", "maxWaitDuration": "10800s"}


# --- durations past google.protobuf.Duration's +-315,576,000,000 s (issue 37: a bare OverflowError)

HUGE = ["99999999999999s", "-99999999999999s", "315576000001s", "inf", "nan", 10**400, timedelta(days=999_999_999)]


@pytest.mark.parametrize("value", HUGE, ids=lambda v: str(v)[:20])
def test_a_duration_past_protobufs_range_is_an_invalid_spec_naming_the_field(value):
    for name in ("timeout", "expected_run_time"):
        with pytest.raises(InvalidTrainingSpec, match=f"{name}.*out of range"):
            templated_args.parse({name: value}, keep_templates=False)


@pytest.mark.parametrize("value", ["99999999999999s", "1e20"])
def test_a_huge_max_wait_duration_is_an_invalid_spec_in_a_preset_operator_and_in_a_plan(value):
    from airflow_gpu_sched.operators import FlexStartTrainingOperator, GpuTrainingOperator

    with pytest.raises(InvalidTrainingSpec, match="max_wait_duration.*out of range"):
        FlexStartTrainingOperator(task_id="t", project_id=PROJECT, location=LOCATION, max_wait_duration=value, **A100)
    with pytest.raises(InvalidTrainingSpec, match=r"plan\[0\].*out of range"):
        GpuTrainingOperator(task_id="t", project_id=PROJECT, location=LOCATION,
                            plan=[{"strategy": "FLEX_START", "max_wait_duration": value}], **A100)
    with pytest.raises(InvalidTrainingSpec, match="timeout.*out of range"):
        GpuTrainingOperator(task_id="t", project_id=PROJECT, location=LOCATION, timeout=value,
                            plan=[{"strategy": "SPOT"}], **A100)


def test_the_largest_duration_protobuf_allows_is_accepted():
    assert templated_args.parse({"timeout": "315576000000s"}, False)["timeout"] == timedelta(seconds=315_576_000_000)
