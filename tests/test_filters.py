"""The list filter grammar (AIP-160, each v1 list's ``filter`` comment): a table of what matches,
a table of what is refused and why, and the limits. Module: airflow_gpu_sched.emulator.filters."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_gpu_sched.emulator.filters import (
    MAX_FILTER_LENGTH,
    MAX_NESTING,
    FilterError,
    Predicate,
    parse_filter,
)

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)

RECORD = {
    "display_name": "train-resnet-v2",
    "state": "JOB_STATE_RUNNING",
    "create_time": T0,
    "update_time": T0 + timedelta(hours=1),
    "labels": {"team": "ml", "env": "prod", "quote": 'say "hi"', "managed-by": "airflow-gpu-sched",
               "a key": "spaced"},
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
    # display_name: "supports =, != comparisons, and : wildcard" (ListCustomJobsRequest.filter)
    case('display_name="train-resnet-v2"', True, "name-eq"),
    case('display_name="train"', False, "name-eq-is-exact"),
    case('display_name!="train"', True, "name-ne"),
    case('display_name!="train-resnet-v2"', False, "name-ne-self"),
    case('display_name:"train-*"', True, "name-wildcard-prefix"),
    case('display_name:"*-v2"', True, "name-wildcard-suffix"),
    case('display_name:"*resnet*"', True, "name-wildcard-infix"),
    case('display_name:"*bert*"', False, "name-wildcard-miss"),
    case('display_name:"resnet*"', False, "name-wildcard-anchored"),
    case("display_name:train*", True, "name-wildcard-bare"),
    case('display_name:"train-res?et*"', False, "name-wildcard-question-mark-is-literal"),
    case("display_name:*", True, "name-present"),
    # AIP-160: "when comparing strings for equality, services should support wildcards"
    case('display_name="train-*"', True, "name-eq-wildcard"),
    case('display_name="*.foo"', False, "name-eq-wildcard-miss"),
    case('display_name!="train-*"', False, "name-ne-wildcard"),
    # state: "supports =, != comparisons"; enums "expect the enum's string representation"
    case("state=JOB_STATE_RUNNING", True, "state-eq-bare"),
    case('state="JOB_STATE_RUNNING"', True, "state-eq-quoted"),
    case("state='JOB_STATE_RUNNING'", True, "state-eq-single-quoted"),
    case("state = JOB_STATE_RUNNING", True, "state-eq-spaces"),
    case("state=JOB_STATE_QUEUED", False, "state-eq-miss"),
    case("state!=JOB_STATE_QUEUED", True, "state-ne"),
    case("state!=JOB_STATE_RUNNING", False, "state-ne-self"),
    # create_time: "=, !=, <, <=, >, >=", "must be in RFC 3339 format" (create_time == T0)
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
    case("create_time>'2026-11-30T00:00:00Z'", True, "time-single-quoted"),
    case('create_time<"2026-11-30T12:00:00.000000001Z"', False, "time-nanos-truncated"),
    # labels: "labels.key=value - key:value equality", "labels.key:* - key existence"
    case('labels.team="ml"', True, "label-eq"),
    case('labels.team="ops"', False, "label-eq-miss"),
    case("labels.team=ml", True, "label-eq-bare"),
    case('labels.team!="ops"', True, "label-ne"),
    case('labels.missing="x"', False, "label-eq-missing-key"),
    case('labels.missing!="x"', True, "label-ne-missing-key"),
    case("labels.team:*", True, "label-exists"),
    case("labels.missing:*", False, "label-exists-miss"),
    case("labels:team", True, "label-exists-map-form"),  # AIP-160 ``m:foo``; models.list's ``labels:key``
    case("labels:missing", False, "label-exists-map-form-miss"),
    case('labels.team:"ml"', True, "label-has-value-is-equality"),  # AIP-160 ``m.foo:42``
    case('labels.team:"m"', False, "label-has-value-not-substring"),
    case('labels.env:"pr*"', True, "label-wildcard"),
    case('labels.env:"dev*"', False, "label-wildcard-miss"),
    case('labels.env="pr*"', True, "label-eq-wildcard"),
    case('labels.missing:"*"', False, "label-quoted-star-missing"),
    case('labels.managed-by="airflow-gpu-sched"', True, "label-key-with-dash"),
    case('labels."managed-by"="airflow-gpu-sched"', True, "label-key-quoted"),
    case("labels.'managed-by'='airflow-gpu-sched'", True, "label-key-single-quoted"),
    case('labels."a key"="spaced"', True, "label-key-with-space-quoted"),  # models.list's own example
    case('labels."a key":*', True, "label-key-quoted-exists"),
    # quoting / escapes
    case(r'labels.quote="say \"hi\""', True, "escaped-quotes"),
    case(r"labels.quote='say \'hi\''", False, "escaped-single-quotes"),
    case("labels.quote='say \"hi\"'", True, "double-inside-single"),
    case(r'labels.quote:"*\"hi\""', True, "escaped-quotes-wildcard"),
    case('display_name="train resnet"', False, "quoted-space-miss"),
    # boolean operators
    case('state=JOB_STATE_RUNNING AND labels.team="ml"', True, "and-true"),
    case('state=JOB_STATE_RUNNING AND labels.team="ops"', False, "and-false"),
    case('state=JOB_STATE_QUEUED OR labels.team="ml"', True, "or-true"),
    case('state=JOB_STATE_QUEUED OR labels.team="ops"', False, "or-false"),
    case("NOT state=JOB_STATE_QUEUED", True, "not-true"),
    case("NOT state=JOB_STATE_RUNNING", False, "not-false"),
    case("-state=JOB_STATE_QUEUED", True, "minus-true"),
    case("-state=JOB_STATE_RUNNING", False, "minus-false"),
    case("-labels.team:*", False, "minus-label"),
    case("-(state=JOB_STATE_FAILED OR state=JOB_STATE_QUEUED)", True, "minus-parens"),
    case('state=JOB_STATE_RUNNING -labels.env="dev"', True, "minus-in-sequence"),
    case("labels.team=ml -labels.env:*", False, "minus-in-sequence-2"),
    case('labels.n=-1', False, "minus-leading-a-value-is-a-value"),
    case('state=JOB_STATE_RUNNING labels.team="ml"', True, "implicit-and-true"),
    case('state=JOB_STATE_RUNNING labels.team="ops"', False, "implicit-and-false"),
    case("state=JOB_STATE_RUNNING NOT labels.team:*", False, "implicit-and-not"),
    # precedence as AIP-160 (Google's list filters) has it: NOT > OR > juxtaposition > AND
    case("state=JOB_STATE_RUNNING OR state=JOB_STATE_FAILED AND state=JOB_STATE_PAUSED", False,
         "or-binds-tighter-than-and"),
    case("state=JOB_STATE_FAILED AND state=JOB_STATE_PAUSED OR state=JOB_STATE_RUNNING", False,
         "or-binds-tighter-than-and-2"),
    case("state=JOB_STATE_RUNNING AND state=JOB_STATE_FAILED OR labels.team:*", True,
         "or-binds-tighter-than-and-3"),
    case("NOT state=JOB_STATE_RUNNING OR labels.team:*", True, "not-binds-tighter-than-or"),
    case("NOT state=JOB_STATE_RUNNING AND labels.team:*", False, "not-binds-tighter-than-and"),
    case("state=JOB_STATE_RUNNING OR state=JOB_STATE_FAILED state=JOB_STATE_PAUSED", False,
         "or-tighter-than-implicit-and"),
    case("state=JOB_STATE_RUNNING labels.team:* OR state=JOB_STATE_FAILED", True,
         "or-tighter-than-implicit-and-2"),
    # parentheses
    case("(state=JOB_STATE_RUNNING OR state=JOB_STATE_FAILED) AND state=JOB_STATE_PAUSED", False,
         "parens-override"),
    case("NOT (state=JOB_STATE_RUNNING AND labels.team:*)", False, "not-parens"),
    case("NOT (state=JOB_STATE_FAILED AND labels.team:*)", True, "not-parens-2"),
    case("((state=JOB_STATE_RUNNING))", True, "nested-parens"),
    case('(labels.team="ml")(labels.env="prod")', True, "parens-juxtaposed"),
    # the proto's own examples (ListCustomJobsRequest.filter)
    case('state="JOB_STATE_SUCCEEDED" AND display_name:"my_job_*"', False, "proto-example-1"),
    case('state!="JOB_STATE_FAILED" OR display_name="my_job"', True, "proto-example-2"),
    case('NOT display_name="my_job"', True, "proto-example-3"),
    case('create_time>"2021-05-18T00:00:00Z"', True, "proto-example-4"),
    case("labels.keyA=valueA", False, "proto-example-5"),
    case("labels.keyB:*", False, "proto-example-6"),
    # the filters this package writes (triggers/poller.py, tools/platform.py)
    case('labels.managed-by="airflow-gpu-sched" AND create_time>="2026-11-30T11:00:00Z" AND '
         'NOT (state="JOB_STATE_SUCCEEDED" OR state="JOB_STATE_FAILED" OR state="JOB_STATE_CANCELLED")',
         True, "poller-active"),
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
        case("-labels:team", [False, True], "minus-map-form"),
    ],
)
def test_filter_selects_records(text: str, expected: list[bool]) -> None:
    pred = parse_filter(text)
    assert [pred(RECORD), pred(OTHER)] == expected


def test_missing_fields_do_not_crash() -> None:
    pred = parse_filter('create_time>"2026-01-01T00:00:00Z" OR labels.a:* OR display_name:"x*"')
    assert pred({}) is False
    assert parse_filter('display_name!="x"')({}) is True
    assert parse_filter("display_name:*")({}) is False


ERROR_CASES = [
    # fields and operators each list documents
    ("foo=1", ["unsupported field 'foo'", "column 1", "display_name", "labels.<key>"], "unknown-field"),
    ("state=JOB_STATE_FAILED AND name=1", ["unsupported field 'name'", "column 28"], "unknown-field-column"),
    ("labels=1", ["unsupported field 'labels'"], "bare-labels"),
    ("labels.:*", ["unsupported field 'labels.'"], "empty-label-key"),
    ("labels.a.b=1", ["labels.<key> takes one key"], "label-traversal"),
    ("display_name.x=1", ["no fields to traverse"], "string-traversal"),
    ("DISPLAY_NAME=1", ["unsupported field 'DISPLAY_NAME'"], "field-case-sensitive"),
    ('display_name<"a"', ["operator '<'", "display_name", "= != :"], "lt-on-name"),
    ("state>=JOB_STATE_FAILED", ["operator '>='", "state"], "ge-on-state"),
    ("state:JOB_STATE_FAILED", ["operator ':'", "state"], "has-on-state"),
    ('labels.a>"b"', ["operator '>'", "labels.a"], "gt-on-label"),
    ('create_time:"2026-11-30T00:00:00Z"', ["operator ':'", "create_time"], "has-on-time"),
    # values
    ("state=JOB_STATE_RUNNNING", ["invalid value 'JOB_STATE_RUNNNING'", "state", "JOB_STATE_QUEUED"],
     "state-typo"),
    ("state=job_state_running", ["invalid value 'job_state_running'"], "state-case-sensitive"),
    ("state=PIPELINE_STATE_RUNNING", ["invalid value 'PIPELINE_STATE_RUNNING'"], "state-other-enum"),
    ('create_time>"yesterday"', ["invalid timestamp 'yesterday'", "column 13"], "bad-time"),
    ('create_time>"2026-11-30T00:00:00"', ["invalid timestamp"], "time-without-zone"),
    ('create_time>"2026-13-30T00:00:00Z"', ["invalid timestamp"], "time-bad-month"),
    ('create_time="2026-11-30"', ["invalid timestamp"], "time-date-only"),
    # forms AIP-160 allows that the emulator does not implement: refused naming the form
    ('display_name:"resnet"', ["':' on display_name only as the wildcard", 'display_name="resnet"'],
     "has-without-wildcard"),
    ("resnet", ["bare value 'resnet'", "global restriction"], "global-restriction"),
    ('"resnet" AND state=JOB_STATE_RUNNING', ["bare value 'resnet'"], "global-restriction-quoted"),
    ("state=JOB_STATE_RUNNING resnet", ["bare value 'resnet'", "column 25"], "global-restriction-in-sequence"),
    ('regex(display_name, "a")', ["function call 'regex(...)'"], "function"),
    ("state=(JOB_STATE_RUNNING OR JOB_STATE_QUEUED)", ["parenthesized value", "value groups"], "value-group"),
    # syntax
    ("(state=JOB_STATE_FAILED", ["end of input", "column 24", "')'"], "unbalanced-open"),
    ("state=JOB_STATE_FAILED)", ["unexpected token ')'", "column 23"], "unbalanced-close"),
    ("((state=JOB_STATE_FAILED)", ["end of input", "')'"], "unbalanced-nested"),
    ("()", ["unexpected token ')'", "column 2", "field name"], "empty-parens"),
    ("state=", ["end of input", "column 7", "value after '='"], "dangling-comparison-op"),
    ("state=JOB_STATE_FAILED AND", ["end of input", "column 27", "field name"], "dangling-and"),
    ("state=JOB_STATE_FAILED OR", ["end of input", "field name"], "dangling-or"),
    ("NOT", ["end of input", "column 4"], "dangling-not"),
    ("-", ["end of input", "column 2"], "dangling-minus"),
    ("NOT NOT state=JOB_STATE_RUNNING", ["unexpected token 'NOT'", "column 5", "one NOT or '-' per term"],
     "double-not"),
    ("--state=JOB_STATE_RUNNING", ["unexpected token '-'", "column 2"], "double-minus"),
    ("OR state=JOB_STATE_FAILED", ["unexpected token 'OR'", "column 1"], "leading-or"),
    ("state=JOB_STATE_FAILED AND OR state=JOB_STATE_PAUSED", ["unexpected token 'OR'", "column 28"], "and-or"),
    ('state "X"', ["bare value 'state'"], "field-then-string"),
    ("state=AND", ["unexpected token 'AND'", "value"], "keyword-as-value"),
    ('display_name="abc', ["unterminated string", "column 14"], "unterminated-string"),
    ("display_name='abc", ["unterminated string", "column 14"], "unterminated-single-quoted"),
    ("labels.\"abc=1", ["unterminated string", "column 8"], "unterminated-key"),
    ("state!JOB_STATE_FAILED", ["unexpected character '!'"], "lone-bang"),
]


@pytest.mark.parametrize(("text", "fragments"), [pytest.param(t, f, id=i) for t, f, i in ERROR_CASES])
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
    # Lower-case 'and' is not a keyword: it is read as a bare value (a global restriction).
    with pytest.raises(FilterError, match="bare value 'and' at column 24"):
        parse_filter("state=JOB_STATE_FAILED and state=JOB_STATE_PAUSED")
    with pytest.raises(FilterError, match="unsupported field 'and'"):
        parse_filter("state=JOB_STATE_FAILED and=Y")
    # a quoted AND is a value, not a keyword
    assert parse_filter('display_name="AND"')({"display_name": "AND"}) is True


def test_string_time_in_record_is_accepted() -> None:
    pred = parse_filter('create_time>"2026-11-30T00:00:00Z"')
    assert pred({"create_time": "2026-12-01T00:00:00Z"}) is True
    assert pred({"create_time": "2026-11-01T00:00:00Z"}) is False


# --- limits: refused as INVALID_ARGUMENT (FilterError), never a RecursionError


def test_nesting_up_to_the_limit_parses() -> None:
    text = "(" * MAX_NESTING + "state=JOB_STATE_RUNNING" + ")" * MAX_NESTING
    assert parse_filter(text)(RECORD) is True


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 5000])
def test_deeper_nesting_is_refused(depth: int) -> None:
    text = "(" * depth + "state=JOB_STATE_RUNNING" + ")" * depth
    text = text[:MAX_FILTER_LENGTH]
    with pytest.raises(FilterError, match=f"nested deeper than {MAX_NESTING}"):
        parse_filter(text)


def test_nested_negations_within_parentheses_are_bounded_too() -> None:
    text = "NOT (" * 2000 + "state=JOB_STATE_RUNNING" + ")" * 2000
    with pytest.raises(FilterError):
        parse_filter(text)


def test_a_filter_longer_than_the_limit_is_refused() -> None:
    text = " AND ".join(["state=JOB_STATE_RUNNING"] * 1000)
    assert len(text) > MAX_FILTER_LENGTH
    with pytest.raises(FilterError, match=f"longer than the emulator's limit of {MAX_FILTER_LENGTH}"):
        parse_filter(text)


@pytest.mark.parametrize("joiner", [" AND ", " OR ", " "])
def test_the_longest_chain_allowed_evaluates_without_deep_recursion(joiner: str) -> None:
    term = "labels.team:*"
    count = MAX_FILTER_LENGTH // (len(term) + len(joiner))
    pred = parse_filter(joiner.join([term] * count))
    assert pred(RECORD) is True and pred(OTHER) is False


# --- the fields each collection's list documents (the v1 protos' ``filter`` comments)


@pytest.mark.parametrize("collection", ["customJobs", "hyperparameterTuningJobs", "trainingPipelines"])
def test_update_time_is_not_a_filter_field_of_any_job_list(collection: str) -> None:
    with pytest.raises(FilterError) as info:
        parse_filter('update_time>="2026-11-30T00:00:00Z"', collection)
    message = str(info.value)
    assert "unsupported field 'update_time'" in message and f"{collection}.list" in message
    assert "display_name, state, create_time, labels.<key>" in message


def test_training_pipelines_also_filter_on_the_task_definition() -> None:
    record = {**RECORD, "state": "PIPELINE_STATE_RUNNING",
              "training_task_definition": "gs://google-cloud-aiplatform/schema/trainingjob/"
                                          "definition/custom_task_1.0.0.yaml"}
    assert parse_filter('training_task_definition:"*custom_task*"', "trainingPipelines")(record) is True
    with pytest.raises(FilterError, match="unsupported field 'training_task_definition'"):
        parse_filter('training_task_definition:"*custom_task*"', "customJobs")
    # pipelines' state is a PipelineState (the proto's example: state="PIPELINE_STATE_SUCCEEDED")
    assert parse_filter('state!="PIPELINE_STATE_FAILED"', "trainingPipelines")(record) is True
    with pytest.raises(FilterError, match="invalid value 'JOB_STATE_RUNNING'"):
        parse_filter("state=JOB_STATE_RUNNING", "trainingPipelines")


def test_models_filter_on_their_own_fields() -> None:
    model = {"model": "123", "display_name": "churn", "labels": {"team": "ml", "a key": "x"},
             "base_model_name": ""}
    assert parse_filter("model=123", "models")(model) is True
    assert parse_filter('displayName="churn"', "models")(model) is True  # camelCase is documented too
    assert parse_filter("labels:team", "models")(model) is True
    assert parse_filter("labels:env", "models")(model) is False
    assert parse_filter('labels."a key":*', "models")(model) is True  # "A key including a space must be quoted"
    for text, field in [("state=JOB_STATE_FAILED", "state"), ('create_time>"2026-11-30T00:00:00Z"', "create_time")]:
        with pytest.raises(FilterError, match=f"unsupported field '{field}'.*models.list"):
            parse_filter(text, "models")
    with pytest.raises(FilterError, match="operator ':'"):
        parse_filter('display_name:"ch*"', "models")  # models: display_name supports = and != only


def test_persistent_resources_take_no_filter() -> None:
    with pytest.raises(FilterError, match="persistentResources.list takes no filter"):
        parse_filter("", "persistentResources")


# --- at the wire: every list answers a hostile filter with Google's 400, never a 500


HOSTILE_FILTERS = [
    pytest.param("(" * 5000 + "state=JOB_STATE_RUNNING" + ")" * 5000, id="5000-nested-parentheses"),
    pytest.param("(" * 5000, id="5000-open-parentheses"),
    pytest.param("NOT (" * 1500 + "labels.a:*" + ")" * 1500, id="nested-negations"),
    pytest.param(" AND ".join(["labels.a:*"] * 3000), id="too-long"),
    pytest.param('display_name="\\', id="trailing-backslash"),
    pytest.param("create_time>9999-99-99T99:99:99Z", id="impossible-time"),
]


@pytest.mark.parametrize("collection", ["customJobs", "hyperparameterTuningJobs", "trainingPipelines", "models"])
@pytest.mark.parametrize("text", HOSTILE_FILTERS)
def test_a_hostile_filter_gets_googles_400_at_the_wire(emulator, collection: str, text: str) -> None:
    import requests

    from tests.conftest import LOCATION, PROJECT

    url = f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/{collection}"
    response = requests.get(url, params={"filter": text}, timeout=30)
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
    assert error["message"].startswith("Invalid filter: filter: ")
    assert requests.get(url, timeout=10).status_code == 200  # the server is unharmed


def test_a_deeply_nested_log_filter_gets_a_400_not_a_500(emulator) -> None:
    import requests

    from tests.conftest import PROJECT

    text = "(" * 5000 + 'resource.type="ml_job"' + ")" * 5000
    response = requests.post(f"{emulator.url}/v2/entries:list",
                             json={"resourceNames": [f"projects/{PROJECT}"], "filter": text}, timeout=30)
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT" and "nested deeper than" in error["message"]


# --- wildcards: linear in pattern and value (issue 37: a regex of ".*" froze the emulator)

ADVERSARIAL = "display_name=\"" + "*a" * 14 + "*b\""  # the 45-character probe of issue 37


@pytest.mark.timeout(10)  # a hang guard, not a speed threshold: a backtracking regex runs for hours here
def test_an_adversarial_wildcard_against_a_long_name_answers() -> None:
    pred = parse_filter(ADVERSARIAL)
    assert pred({"display_name": "a" * 5000}) is False
    assert pred({"display_name": "a" * 5000 + "b"}) is True


@pytest.mark.parametrize("pattern, value, expected", [
    ("a*", "a", True), ("*a", "a", True), ("a*a", "a", False), ("a*a", "aa", True), ("*", "", True),
    ("**", "x", True), ("a**b", "ab", True), ("*ab*ab*", "abab", True), ("*ab*ab*", "aba", False),
    ("x*y*z", "xyyz", True), ("x*y*z", "xzy", False), ("*aab", "aaab", True), ("a*b*a", "aba", True),
])
def test_wildcards_match_as_before(pattern: str, value: str, expected: bool) -> None:
    import re

    regex = re.compile("^" + ".*".join(re.escape(p) for p in pattern.split("*")) + "$", re.DOTALL)
    assert (regex.match(value) is not None) is expected  # the old semantics, on inputs where it is quick
    assert parse_filter(f'display_name="{pattern}"')({"display_name": value}) is expected


@pytest.mark.timeout(60)
def test_the_wildcard_probe_answers_at_the_wire_and_the_control_api_still_answers(emulator) -> None:
    import requests

    from tests.conftest import LOCATION, PROJECT

    url = f"{emulator.url}/v1/projects/{PROJECT}/locations/{LOCATION}/customJobs"
    body = {"displayName": "a" * 120, "jobSpec": {"workerPoolSpecs": [{
        "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1", "containerSpec": {"imageUri": "x"}}]}}
    assert requests.post(url, json=body, timeout=10).status_code == 200
    for text in (ADVERSARIAL, 'labels.x="' + "*a" * 14 + '*b"', 'display_name:"' + "*a" * 14 + '*b"'):
        response = requests.get(url, params={"filter": text}, timeout=30)
        assert response.status_code == 200 and response.json().get("customJobs", []) == [], response.text[:300]
    assert requests.get(f"{emulator.url}/emulator/v1/stats", timeout=10).status_code == 200
