"""Tests for airflow_gpu_sched.emulator.filters."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_gpu_sched.emulator.filters import FilterError, Predicate, parse_filter

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)

RECORD = {
    "display_name": "train-resnet-v2",
    "state": "JOB_STATE_RUNNING",
    "create_time": T0,
    "update_time": T0 + timedelta(hours=1),
    "labels": {"team": "ml", "env": "prod", "quote": 'say "hi"'},
}

OTHER = {
    "display_name": "eval_bert",
    "state": "JOB_STATE_QUEUED",
    "create_time": T0 - timedelta(days=1),
    "update_time": T0 - timedelta(days=1),
    "labels": {},
}


def case(text: str, expected: bool, id: str):
    return pytest.param(text, expected, id=id)


MATCH_CASES = [
    # display_name
    case('display_name="train-resnet-v2"', True, "name-eq"),
    case('display_name="train"', False, "name-eq-is-exact"),
    case('display_name!="train"', True, "name-ne"),
    case('display_name!="train-resnet-v2"', False, "name-ne-self"),
    case('display_name:"resnet"', True, "name-has-substring"),
    case('display_name:"bert"', False, "name-has-substring-miss"),
    case('display_name:"train-*"', True, "name-wildcard-prefix"),
    case('display_name:"*-v2"', True, "name-wildcard-suffix"),
    case('display_name:"*bert*"', False, "name-wildcard-miss"),
    case('display_name:"resnet*"', False, "name-wildcard-anchored"),
    case("display_name:train*", True, "name-wildcard-bare"),
    # state
    case("state=JOB_STATE_RUNNING", True, "state-eq-bare"),
    case('state="JOB_STATE_RUNNING"', True, "state-eq-quoted"),
    case("state = JOB_STATE_RUNNING", True, "state-eq-spaces"),
    case("state=JOB_STATE_QUEUED", False, "state-eq-miss"),
    case("state!=JOB_STATE_QUEUED", True, "state-ne"),
    case("state!=JOB_STATE_RUNNING", False, "state-ne-self"),
    # times (create_time == T0)
    case('create_time="2026-11-30T12:00:00Z"', True, "time-eq"),
    case('create_time="2026-11-30T13:00:00+01:00"', True, "time-eq-offset"),
    case('create_time!="2026-11-30T12:00:00Z"', False, "time-ne"),
    case('create_time>"2026-11-30T00:00:00Z"', True, "time-gt"),
    case('create_time>"2026-11-30T12:00:00Z"', False, "time-gt-strict"),
    case('create_time>="2026-11-30T12:00:00Z"', True, "time-ge"),
    case('create_time<"2026-11-30T12:00:00.000001Z"', True, "time-lt-micro"),
    case('create_time<"2026-11-30T12:00:00Z"', False, "time-lt-strict"),
    case('create_time<="2026-11-30T12:00:00Z"', True, "time-le"),
    case("create_time>2026-11-30T00:00:00Z", True, "time-bare-value"),
    case('create_time<"2026-11-30T12:00:00.000000001Z"', False, "time-nanos-truncated"),
    # labels
    case('labels.team="ml"', True, "label-eq"),
    case('labels.team="ops"', False, "label-eq-miss"),
    case("labels.team=ml", True, "label-eq-bare"),
    case('labels.team!="ops"', True, "label-ne"),
    case('labels.missing="x"', False, "label-eq-missing-key"),
    case('labels.missing!="x"', True, "label-ne-missing-key"),
    case("labels.team:*", True, "label-exists"),
    case("labels.missing:*", False, "label-exists-miss"),
    case('labels.env:"pr*"', True, "label-wildcard"),
    case('labels.env:"dev*"', False, "label-wildcard-miss"),
    case('labels.missing:"*"', False, "label-quoted-star-missing"),
    # quoting / escapes
    case(r'labels.quote="say \"hi\""', True, "escaped-quotes"),
    case(r'labels.quote:"\"hi\""', True, "escaped-quotes-has"),
    case('display_name="train resnet"', False, "quoted-space-miss"),
    # boolean operators
    case('state=JOB_STATE_RUNNING AND labels.team="ml"', True, "and-true"),
    case('state=JOB_STATE_RUNNING AND labels.team="ops"', False, "and-false"),
    case('state=JOB_STATE_QUEUED OR labels.team="ml"', True, "or-true"),
    case('state=JOB_STATE_QUEUED OR labels.team="ops"', False, "or-false"),
    case("NOT state=JOB_STATE_QUEUED", True, "not-true"),
    case("NOT state=JOB_STATE_RUNNING", False, "not-false"),
    case("NOT NOT state=JOB_STATE_RUNNING", True, "not-not"),
    case('state=JOB_STATE_RUNNING labels.team="ml"', True, "implicit-and-true"),
    case('state=JOB_STATE_RUNNING labels.team="ops"', False, "implicit-and-false"),
    case("state=JOB_STATE_RUNNING NOT labels.team:*", False, "implicit-and-not"),
    # precedence as AIP-160 (Google's list filters) has it: NOT > OR > juxtaposition > AND
    case("state=JOB_STATE_RUNNING OR state=X AND state=Y", False, "or-binds-tighter-than-and"),
    case("state=X AND state=Y OR state=JOB_STATE_RUNNING", False, "or-binds-tighter-than-and-2"),
    case("state=JOB_STATE_RUNNING AND state=X OR labels.team:*", True, "or-binds-tighter-than-and-3"),
    case("NOT state=JOB_STATE_RUNNING OR labels.team:*", True, "not-binds-tighter-than-or"),
    case("NOT state=JOB_STATE_RUNNING AND labels.team:*", False, "not-binds-tighter-than-and"),
    case("state=JOB_STATE_RUNNING OR state=X state=Y", False, "or-tighter-than-implicit-and"),
    case("state=JOB_STATE_RUNNING labels.team:* OR state=X", True, "or-tighter-than-implicit-and-2"),
    # parentheses
    case("(state=JOB_STATE_RUNNING OR state=X) AND state=Y", False, "parens-override"),
    case("NOT (state=JOB_STATE_RUNNING AND labels.team:*)", False, "not-parens"),
    case("NOT (state=X AND labels.team:*)", True, "not-parens-2"),
    case("((state=JOB_STATE_RUNNING))", True, "nested-parens"),
    case('(labels.team="ml")(labels.env="prod")', True, "parens-juxtaposed"),
    # empty
    case("", True, "empty"),
    case("   \t ", True, "blank"),
]


@pytest.mark.parametrize(("text", "expected"), MATCH_CASES)
def test_match(text: str, expected: bool) -> None:
    pred = parse_filter(text)
    assert isinstance(pred, Predicate)
    assert pred(RECORD) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        case("", [True, True], "empty-matches-all"),
        case("state=JOB_STATE_QUEUED", [False, True], "state"),
        case('display_name:"*_*"', [False, True], "wildcard-underscore"),
        case("labels.team:*", [True, False], "label-exists"),
        case('labels.team!="ml"', [False, True], "label-ne-empty-labels"),
        case('create_time<"2026-11-30T00:00:00Z"', [False, True], "time-lt"),
    ],
)
def test_filter_selects_records(text: str, expected: list[bool]) -> None:
    pred = parse_filter(text)
    assert [pred(RECORD), pred(OTHER)] == expected


def test_missing_fields_do_not_crash() -> None:
    pred = parse_filter('create_time>"2026-01-01T00:00:00Z" OR labels.a:* OR display_name:"x"')
    assert pred({}) is False
    assert parse_filter('display_name!="x"')({}) is True


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        pytest.param("foo=1", ["unsupported field 'foo'", "column 1", "display_name", "labels.<key>"], id="unknown-field"),
        pytest.param("state=X AND name=1", ["unsupported field 'name'", "column 13"], id="unknown-field-column"),
        pytest.param("labels=1", ["unsupported field 'labels'"], id="bare-labels"),
        pytest.param("labels.:*", ["unsupported field 'labels.'"], id="empty-label-key"),
        pytest.param("DISPLAY_NAME=1", ["unsupported field 'DISPLAY_NAME'"], id="field-case-sensitive"),
        pytest.param("(state=X", ["end of input", "column 9", "')'"], id="unbalanced-open"),
        pytest.param("state=X)", ["unexpected token ')'", "column 8"], id="unbalanced-close"),
        pytest.param("((state=X)", ["end of input", "')'"], id="unbalanced-nested"),
        pytest.param("()", ["unexpected token ')'", "column 2", "field name"], id="empty-parens"),
        pytest.param('create_time>"yesterday"', ["invalid timestamp 'yesterday'", "column 13"], id="bad-time"),
        pytest.param('create_time>"2026-11-30T00:00:00"', ["invalid timestamp"], id="time-without-zone"),
        pytest.param('create_time>"2026-13-30T00:00:00Z"', ["invalid timestamp"], id="time-bad-month"),
        pytest.param('create_time="2026-11-30"', ["invalid timestamp"], id="time-date-only"),
        pytest.param("state=", ["end of input", "column 7", "value after '='"], id="dangling-comparison-op"),
        pytest.param("state=X AND", ["end of input", "column 12", "field name"], id="dangling-and"),
        pytest.param("state=X OR", ["end of input", "field name"], id="dangling-or"),
        pytest.param("NOT", ["end of input", "column 4"], id="dangling-not"),
        pytest.param("OR state=X", ["unexpected token 'OR'", "column 1"], id="leading-or"),
        pytest.param("state=X AND OR state=Y", ["unexpected token 'OR'", "column 13"], id="and-or"),
        pytest.param("state", ["end of input", "operator"], id="field-without-op"),
        pytest.param('state "X"', ['string "X"', "operator"], id="field-then-string"),
        pytest.param("state=AND", ["unexpected token 'AND'", "value"], id="keyword-as-value"),
        pytest.param('display_name<"a"', ["operator '<'", "display_name", "= != :"], id="lt-on-name"),
        pytest.param("state>=X", ["operator '>='", "state"], id="ge-on-state"),
        pytest.param("state:X", ["operator ':'", "state"], id="has-on-state"),
        pytest.param('labels.a>"b"', ["operator '>'", "labels.a"], id="gt-on-label"),
        pytest.param('create_time:"2026-11-30T00:00:00Z"', ["operator ':'", "create_time"], id="has-on-time"),
        pytest.param('display_name="abc', ["unterminated string", "column 14"], id="unterminated-string"),
        pytest.param("state!X", ["unexpected character '!'"], id="lone-bang"),
    ],
)
def test_errors(text: str, fragments: list[str]) -> None:
    with pytest.raises(FilterError) as info:
        parse_filter(text)
    message = str(info.value)
    assert message.startswith("filter: ")
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_filter_error_is_value_error() -> None:
    with pytest.raises(ValueError):
        parse_filter("nope=1")


def test_keywords_are_case_sensitive() -> None:
    # Lower-case 'and' is not a keyword: it is read as a field name (implicit AND).
    with pytest.raises(FilterError, match="unexpected token 'state' at column 13; expected an operator"):
        parse_filter("state=X and state=Y")
    with pytest.raises(FilterError, match="unsupported field 'and'"):
        parse_filter("state=X and=Y")


def test_string_time_in_record_is_accepted() -> None:
    pred = parse_filter('create_time>"2026-11-30T00:00:00Z"')
    assert pred({"create_time": "2026-12-01T00:00:00Z"}) is True
    assert pred({"create_time": "2026-11-01T00:00:00Z"}) is False


# --- the fields each collection's list documents (aiplatform v1 discovery document, ``filter``)


@pytest.mark.parametrize("collection", ["customJobs", "hyperparameterTuningJobs", "trainingPipelines"])
def test_update_time_is_not_a_filter_field_of_any_job_list(collection: str) -> None:
    with pytest.raises(FilterError) as info:
        parse_filter('update_time>="2026-11-30T00:00:00Z"', collection)
    message = str(info.value)
    assert "unsupported field 'update_time'" in message and f"{collection}.list" in message
    assert "display_name, state, create_time, labels.<key>" in message


def test_training_pipelines_also_filter_on_the_task_definition() -> None:
    record = {**RECORD, "training_task_definition": "gs://google-cloud-aiplatform/schema/trainingjob/"
                                                    "definition/custom_task_1.0.0.yaml"}
    assert parse_filter('training_task_definition:"*custom_task*"', "trainingPipelines")(record) is True
    with pytest.raises(FilterError, match="unsupported field 'training_task_definition'"):
        parse_filter('training_task_definition:"*custom_task*"', "customJobs")


def test_models_filter_on_their_own_fields() -> None:
    model = {"model": "123", "display_name": "churn", "labels": {"team": "ml"}, "base_model_name": ""}
    assert parse_filter("model=123", "models")(model) is True
    assert parse_filter('displayName="churn"', "models")(model) is True  # camelCase is documented too
    assert parse_filter("labels:team", "models")(model) is True
    assert parse_filter("labels:env", "models")(model) is False
    for text, field in [("state=X", "state"), ('create_time>"2026-11-30T00:00:00Z"', "create_time")]:
        with pytest.raises(FilterError, match=f"unsupported field '{field}'.*models.list"):
            parse_filter(text, "models")
    with pytest.raises(FilterError, match="operator ':'"):
        parse_filter('display_name:"ch*"', "models")  # models: display_name supports = and != only


def test_persistent_resources_take_no_filter() -> None:
    with pytest.raises(FilterError, match="persistentResources.list takes no filter"):
        parse_filter("", "persistentResources")
