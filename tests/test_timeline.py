"""The timeline's layout, pure: rows per task and attempt, no label over a bar, a marker for every
preemption, fallback, resubmission and cancellation; and the SVG it writes."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu_sched.drawing.timeline import (
    MARKS,
    Night,
    attempt_from_history,
    night_from_results,
    task_from_attempts,
    task_from_result,
)
from airflow_gpu_sched.drawing.timeline_svg import Picture, layout, text_width, to_svg

T0 = datetime(2026, 11, 30, 22, 0, tzinfo=timezone.utc)
SVG = "{http://www.w3.org/2000/svg}"


def _at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def attempt(strategy, location, state, created, started, ended, outcome, restarts=0, job="j", cost=None):
    return {"job_name": job, "strategy": strategy, "location": location, "state": f"JOB_STATE_{state}",
            "create_time": _at(created) if created is not None else None,
            "start_time": _at(started) if started is not None else None,
            "end_time": _at(ended) if ended is not None else None,
            "queued_seconds": 60.0 * ((started if started is not None else ended) - created) if created is not None
            else 600.0,
            "run_seconds": 60.0 * (ended - started) if started is not None else 0.0,
            "gpu_hours": 8 * (ended - started) / 60 if started is not None else 0.0,
            "cost": cost, "error": None, "outcome": outcome, "restarts_observed": restarts,
            "accelerator_type": "NVIDIA_H100_80GB"}


# A night with every kind of event: a pool that never had room (no job), a FLEX_START wait that
# ran out, a SPOT job preempted past its 6 restarts and resubmitted, a cancelled job, a failure.
PLAN = {"preemptions": 7, "currency": "USD", "attempts": [
    {**attempt("PERSISTENT_RESOURCE", "us-central1", "FAILED", None, None, None, "capacity_timeout"),
     "job_name": None, "error": "the pool stayed busy for 10m"},
    attempt("FLEX_START", "us-central1", "FAILED", 10, None, 130, "capacity_timeout", cost=0.0),
    attempt("SPOT", "us-central1", "FAILED", 130, 135, 200, "preempted", restarts=6, cost=12.5),
    attempt("SPOT", "us-central1", "SUCCEEDED", 201, 205, 300, "succeeded", cost=18.0)]}
CANCELLED = {"preemptions": 0, "attempts": [
    attempt("FLEX_START", "us-east4", "CANCELLED", 0, None, 40, "cancelled")]}
FAILED = {"preemptions": 0, "attempts": [
    attempt("STANDARD", "europe-west4", "FAILED", 5, 6, 30, "failed")]}


def _night(title="nightly_retraining manual__2026-11-30") -> Night:
    return night_from_results(title, [("train_with_a_plan", PLAN), ("evaluate_on_gpu", CANCELLED),
                                      ("train_baseline", FAILED)])


def _overlaps(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _check(picture: Picture) -> None:
    """What the reader relies on: no text over a bar or over another text, everything inside the
    picture, every marker on the bars' span."""
    bars = [(b.x, b.y, b.x + b.w, b.y + b.h) for b in picture.boxes if b.kind != "tick" and b.w > 12]
    texts = [t for t in picture.texts]
    for t in texts:
        box = t.box
        assert 0 <= box[0] and box[2] <= picture.width and box[3] <= picture.height, (t, picture.width)
        for bar in bars:
            assert not _overlaps(box, bar), (t.text, bar)
    for i, a in enumerate(texts):
        for b in texts[i + 1:]:
            assert not _overlaps(a.box, b.box), (a.text, b.text)
    for g in picture.glyphs:
        if g.row >= 0:
            assert picture.bars_left <= g.x <= picture.bars_right, g


def test_rows_per_task_and_attempt_with_strategy_region_and_cost():
    picture = layout([_night()])
    assert [r[1:] for r in picture.rows] == [
        ("train_with_a_plan", "#1"), ("train_with_a_plan", "#2"), ("train_with_a_plan", "#3"),
        ("train_with_a_plan", "#4"), ("evaluate_on_gpu", "#1"), ("train_baseline", "#1")]
    texts = [t.text for t in picture.texts]
    assert "  #3 SPOT us-central1" in texts and "  #1 PERSISTENT_RESOURCE us-central1" in texts
    row3 = next(t for t in texts if t.startswith("PREEMPTED"))
    assert "ran  1h05m" in row3 and "12.50 USD" in row3
    assert any(t.startswith("waited 2h19m for NVIDIA_H100_80GB") and "30.50 USD" in t for t in texts)  # the task's totals
    assert any(t.startswith("no job: the pool stayed busy") for t in texts)
    _check(picture)


def test_every_preemption_fallback_resubmission_and_cancellation_has_a_marker():
    picture = layout([_night()])
    by_row: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for g in picture.glyphs:
        if g.row >= 0:
            by_row.setdefault(picture.rows[g.row][1:], []).append((g.kind, g.count))
    # the SPOT job's 6 service restarts (their times unknown) and the last preemption: one marker, x7
    preempted = sum(c for marks in by_row.values() for k, c in marks if k == "preempted")
    assert preempted == PLAN["preemptions"] == 7
    assert ("preempted", 7) in by_row[("train_with_a_plan", "#3")]
    assert ("fell back", 1) in by_row[("train_with_a_plan", "#3")]  # FLEX_START -> SPOT
    assert ("fell back", 1) in by_row[("train_with_a_plan", "#2")]  # the pool -> FLEX_START
    assert ("resubmitted", 1) in by_row[("train_with_a_plan", "#4")]  # SPOT -> SPOT, same region
    assert by_row[("evaluate_on_gpu", "#1")] == [("cancelled", 1)]
    assert by_row[("train_baseline", "#1")] == [("failed", 1)]
    # the legend shows each kind of marker once
    assert sorted(g.kind for g in picture.glyphs if g.row < 0) == sorted(MARKS)


def test_a_marker_does_not_hide_another_at_the_same_time():
    """The resubmission is drawn on the new attempt's row, not on the preempted one's end."""
    picture = layout([_night()])
    places = [(round(g.x), g.y) for g in picture.glyphs if g.row >= 0]
    assert len(places) == len(set(places))


def test_long_labels_widen_the_label_column_instead_of_running_into_the_bars():
    long = "a_task_id_as_long_as_a_platform_team_would_ever_write_for_its_nightly_retraining_job"
    picture = layout([night_from_results("n", [(long, PLAN)])])
    assert picture.bars_left > text_width(long, "task")
    _check(picture)
    assert any(t.text == long for t in picture.texts)  # whole, not cut


def test_a_long_error_stays_inside_the_picture():
    result = {"preemptions": 0, "attempts": [{**PLAN["attempts"][0], "error": "quota refused: " + "x" * 300}]}
    picture = layout([night_from_results("n", [("train", result)])])
    _check(picture)
    assert any(t.text.startswith("no job: quota refused") and t.text.endswith("...") for t in picture.texts)


def test_an_xcom_without_outcomes_still_marks_the_task_s_preemptions():
    old = {"preemptions": 7, "attempts": [{k: v for k, v in a.items() if k not in ("outcome", "restarts_observed")}
                                          for a in PLAN["attempts"][2:]]}
    task = task_from_result("train", old)
    assert sum(a.preemptions for a in task.attempts) == 7


def test_the_emulator_s_histories_mark_each_restart_at_its_time():
    history = [("JOB_STATE_QUEUED", T0), ("JOB_STATE_PENDING", T0 + timedelta(minutes=1))]
    t = T0 + timedelta(minutes=2)
    for _ in range(6):  # run 5 min, preempted, provisioning 1 min again
        history += [("JOB_STATE_RUNNING", t), ("JOB_STATE_QUEUED", t + timedelta(minutes=5)),
                    ("JOB_STATE_PENDING", t + timedelta(minutes=5, seconds=1))]
        t += timedelta(minutes=6, seconds=1)
    history += [("JOB_STATE_RUNNING", t), ("JOB_STATE_FAILED", t + timedelta(minutes=5))]
    first = attempt_from_history("#1", "SPOT", "us-central1", history, t, restarts=6, preempted_at_end=True, gpus=1)
    second = attempt_from_history("#2", "SPOT", "us-central1", [
        ("JOB_STATE_QUEUED", t + timedelta(minutes=6)), ("JOB_STATE_RUNNING", t + timedelta(minutes=8)),
        ("JOB_STATE_SUCCEEDED", t + timedelta(minutes=20))], t, gpus=1)
    task = task_from_attempts("train_on_spot", [first, second])
    marks = [m for m in task.attempts[0].marks if m.kind == "preempted"]
    assert len(marks) == 7 and all(m.count == 1 for m in marks)
    assert [m.time for m in marks[:6]] == [s for s, (state, s) in
                                           zip([h[1] for h in history], history) if state == "JOB_STATE_QUEUED"][1:]
    assert task.attempts[0].state == "PREEMPTED" and task.attempts[0].run_seconds == 7 * 300
    assert [m.kind for m in task.attempts[1].marks] == ["resubmitted"]
    picture = layout([Night("spot_training", (task,))])
    assert sum(g.count for g in picture.glyphs if g.kind == "preempted" and g.row >= 0) == 7
    _check(picture)


def test_the_svg_is_well_formed_and_draws_what_the_layout_placed():
    picture = layout([_night()], "a night")
    root = ET.fromstring(to_svg(picture))
    assert root.get("width") == str(picture.width)
    assert ["".join(t.itertext()) for t in root.iter(f"{SVG}text")][:len(picture.texts)] == \
        [t.text for t in picture.texts]
    marks = [g for g in root.iter(f"{SVG}g")]
    assert len(marks) == len(picture.glyphs)
    assert sum(int(g.get("data-count")) for g in marks if g.get("class") == "mark preempted") == 7 + 1


names = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=70)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(names, st.lists(st.tuples(
    st.sampled_from(["FLEX_START", "SPOT", "STANDARD", "PERSISTENT_RESOURCE"]),
    st.sampled_from(["us-central1", "europe-west4", "asia-southeast1"]),
    st.floats(0, 600), st.floats(0, 120), st.floats(0.01, 600), st.integers(0, 6)), min_size=1, max_size=4)),
    min_size=1, max_size=4))
def test_no_label_ever_overlaps_a_bar_and_no_preemption_goes_unmarked(tasks):
    results = []
    for name, attempts in tasks:
        raw = [attempt(s, r, "FAILED" if n else "SUCCEEDED", c, c + q, c + q + run, "preempted" if n else "succeeded",
                       restarts=n - 1 if n else 0) for s, r, c, q, run, n in attempts]
        results.append((name, {"preemptions": sum(n for *_, n in attempts), "attempts": raw}))
    night = night_from_results("n", results)
    picture = layout([night])
    _check(picture)
    marked = sum(g.count for g in picture.glyphs if g.kind == "preempted" and g.row >= 0)
    assert marked == sum(n for _, attempts in tasks for *_, n in attempts)
