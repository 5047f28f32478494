"""The operator's calls to Vertex AI, each written once, for a single job (operators/base.py) and
a race's members (operators/race.py) alike: a job by name, a job by its submission key's label,
the create under a submission key (one reconcile loop for an ambiguous create), the cancel, the
preflight reads (GPU quota, persistent resource, reservation: each as the plan's event) and the
failed job's log tail.

The operator reaches the service through its own ``client(location)`` (the connection, the
impersonation chain and the endpoint of that region), not through ``self.hook``: the triggers
build the same client from the same connection in the triggerer, and the tests' fakes of the
service are the emulator, not a hook.

May import: vertex, orchestration, operators; airflow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_gpu_sched.operators.running import AMBIGUOUS_CREATE_ATTEMPTS, execution_deadline
from airflow_gpu_sched.orchestration.ledger import SUBMISSION_LABEL

if TYPE_CHECKING:
    from datetime import datetime

    from airflow_gpu_sched.orchestration import plan_engine as engine
    from airflow_gpu_sched.orchestration.plans import Step
    from airflow_gpu_sched.vertex.models import CustomJob


def location_of(job_name: str) -> str:
    """``projects/p/locations/<region>/...``: the region a resource lives in."""
    return job_name.split("/")[3]


def find_by_name(op: Any, job_name: str, missing_ok: bool = False) -> Any:
    """The job (of its own type) as the service has it now; None when gone and ``missing_ok``."""
    from airflow_gpu_sched.orchestration.job_types import job_type_of
    from airflow_gpu_sched.vertex.client import NotFoundError

    try:
        return job_type_of(job_name).get(op.client(location_of(job_name)), job_name)
    except NotFoundError:
        if not missing_ok:
            raise
        return None


def find_by_key(op: Any, key: str, location: str) -> Any:
    """The job carrying submission key ``key`` in ``location``, or None."""
    flt = f'labels.{SUBMISSION_LABEL}="{key}"'  # "labels.key=value" (ListCustomJobsRequest.filter)
    return next(op.job_kind.list_all(op.client(location), flt, 10), None)  # empty pages too


def create(op: Any, job: CustomJob, key: str, location: str, what: str) -> Any:
    """Create ``job`` (labelled with submission key ``key``) in ``location``. A create whose
    outcome is unknown may or may not have made a job: the key's label says which; only when no
    job carries it is the create sent again (at most :data:`AMBIGUOUS_CREATE_ATTEMPTS` times)."""
    from airflow_gpu_sched.orchestration import stops
    from airflow_gpu_sched.orchestration.training_spec import job_options
    from airflow_gpu_sched.vertex.client import AmbiguousCreateError

    client = op.client(location)
    for attempt in range(1, AMBIGUOUS_CREATE_ATTEMPTS + 1):
        stops.check(op.try_key, f"creating {what} in {location}")  # the one way to a create: a stopped try makes none
        try:
            return op.job_kind.create(client, op.job_kind.body(job, job_options(op)))
        except AmbiguousCreateError as exc:
            found = find_by_key(op, key, location)
            if found is not None:
                return found
            if attempt == AMBIGUOUS_CREATE_ATTEMPTS:
                raise
            op.log.warning("create of %s was ambiguous (%s) and no job carries its key: creating again", what, exc)
    raise AssertionError("unreachable: the last attempt returns or raises")


def cancel(op: Any, job_name: str) -> None:
    """Ask the service to cancel the job (of its own type)."""
    from airflow_gpu_sched.orchestration import stops
    from airflow_gpu_sched.orchestration.job_types import job_type_of

    stops.note_cancel(job_name)  # before it is sent: a cancel whose answer is lost may still land
    job_type_of(job_name).cancel(op.client(location_of(job_name)), job_name)


# ---------------------------------------------------------------------------------------- preflight reads


def read_quota(op: Any, step: Step, location: str) -> engine.QuotaRead:
    """The region's GPU quota for the step's tier against what the job holds at once."""
    from airflow_gpu_sched.operators.running import now
    from airflow_gpu_sched.orchestration import plan_engine as engine
    from airflow_gpu_sched.orchestration.quota import shortfalls

    spec = op.build_job(step=step).job_spec
    # one copy (a tuning job's trial): parallel trials past the quota wait their turn (quota.at_once)
    found = shortfalls(op.client(location), op.project_id, location, step.strategy, spec.accelerator_demand())
    if found is None:
        return engine.QuotaRead(now=now(), unreadable=True)
    return engine.QuotaRead(now=now(), too_low="; ".join(str(s) for s in found) or None)


def read_resource(op: Any, context: Any, action: engine.ReadResource) -> engine.ResourceRead:
    """The persistent resource and the job's fit on it."""
    from airflow_gpu_sched.operators.running import now
    from airflow_gpu_sched.orchestration import plan_engine as engine
    from airflow_gpu_sched.vertex.persistent_rules import check_persistent_fit

    resource = op.client(action.location).get_persistent_resource(action.name)
    fit = check_persistent_fit(op.validated_job(context, step=action.step).job_spec, resource)
    return engine.ResourceRead(
        now=now(), name=action.name, state=resource.state.value if resource.state else "STATE_UNSPECIFIED",
        error=resource.error.message if resource.error else None, mismatches=tuple(fit.mismatches),
        runs_now=fit.runs_now, shortages=tuple((s.resource_pool_id, s.free, s.wanted) for s in fit.shortages))


def read_reservation(op: Any, context: Any, action: engine.ReadReservation) -> engine.ReservationRead:
    """The Compute Engine reservation (``reservations.get``) and the job's fit on it."""
    from airflow_gpu_sched.operators.running import now
    from airflow_gpu_sched.orchestration import plan_engine as engine
    from airflow_gpu_sched.vertex.client import NotFoundError, VertexError
    from airflow_gpu_sched.vertex.reservations import fit

    try:
        reservation = op.client(action.location).get_reservation(action.name)
    except NotFoundError:
        return engine.ReservationRead(now=now(), name=action.name, missing=True)
    except VertexError as exc:  # no permission, or unreachable past the retries
        return engine.ReservationRead(now=now(), name=action.name, unreadable=str(exc)[:300])
    found = fit(op.validated_job(context, step=action.step).job_spec, reservation)
    return engine.ReservationRead(now=now(), name=action.name, problems=found.problems, free=found.free,
                                  count=found.count, needed=found.needed)


def failed_job_texts(op: Any, job_name: str, job_error: str | None) -> tuple[str | None, str | None]:
    """A FAILED job's error (Vertex's, which may quote the job's output) and its failing
    replica's last lines into the task log, with the job's secrets cut from both
    (:func:`job_logs.job_cut`); no tail when the job's env cannot be read."""
    from airflow_gpu_sched.operators.job_logs import job_cut, masked, read_failure_tail
    from airflow_gpu_sched.vertex.client import VertexError

    client = op.client(location_of(job_name))
    try:
        cut = job_cut(client, job_name)
    except VertexError as exc:
        op.log.warning("the failed job's env could not be read, so its log lines are not shown: %s", exc)
        return (masked(job_error) if job_error else job_error), None
    tail = read_failure_tail(client, job_name, op.failure_log_lines, cut) if op.failure_log_lines else None
    if tail:
        op.log.error("the job failed; %s", tail)
    return (cut(job_error) if job_error else job_error), tail


HEAR_SECONDS = 5.0  # the clock read's own retry budget: a service that does not answer leaves the wall clock


def resumed(op: Any, context: Any) -> datetime | None:
    """A resume from the triggerer starts as a new try does: the service's time heard once in this
    process, and the try's execution deadline (Airflow's wall clock) returned."""
    hear_service(op)
    return execution_deadline(op, context)


def hear_service(op: Any) -> None:
    """Before this process decides anything by the clock, hear the service's time once
    (vertex/service_clock.py): a task process that has not yet had an answer (a new try, a
    resume from the triggerer) lists one custom job, whose ``Date`` sets the clock. Not on
    Google's own endpoints: there the service's time is the wall clock. A failure leaves the
    wall clock (the next answer sets it)."""
    from urllib.parse import urlsplit

    from airflow_gpu_sched.vertex import service_clock
    from airflow_gpu_sched.vertex.client import RetryPolicy, VertexClient

    if service_clock.CLOCK.heard_any:
        return
    try:
        client = VertexClient.from_connection(op.gcp_conn_id, location=op.location, project=op.project_id,
                                              retry=RetryPolicy(initial=0.5, maximum=2.0, deadline=HEAR_SECONDS),
                                              impersonation_chain=op.impersonation_chain)
        host = (urlsplit(client.api.api_endpoint or "https://googleapis.com").hostname or "").lower()
        if host == "googleapis.com" or host.endswith(".googleapis.com"):
            return
        with client:
            client.list_custom_jobs_page(page_size=1)
    except Exception as exc:  # noqa: BLE001 (the calls that follow meet the same error and say it)
        op.log.info("could not read the service's time (%s): durations count on the wall clock until it answers",
                    type(exc).__name__)
