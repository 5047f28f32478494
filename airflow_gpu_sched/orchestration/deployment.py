"""Which Airflow deployment created a job: the ``airflow-deployment`` label (docs/reaper.md).

Two deployments (staging and prod) may share a Google Cloud project, a region and the same DAGs:
the labels ``airflow-dag``/``airflow-task``/``airflow-run`` are then the same on both sides, so
the reaper and ``jobs orphans`` act only on jobs whose ``airflow-deployment`` label is their
own deployment's id. Every component of one deployment (scheduler, worker, triggerer, the CLI)
must compute the same id; two deployments must not.

The id is ``[gpu_sched] deployment_id`` (env ``AIRFLOW__GPU_SCHED__DEPLOYMENT_ID``) when set:
a label value, ``[a-z0-9_-]``, 1 to 63 characters, refused otherwise (never rewritten: two
spellings that looked the same after a rewrite would be one owner). When unset, it is the Airflow
Variable ``airflow_gpu_sched_deployment_id``, which the first task to submit a job creates
(``dep-`` and 16 random hex digits): a value kept in the deployment's own metadata database, so
it survives restarts and every component reads the same one (workers and triggerers through the
Execution API, the CLI from the database), and two deployments (two databases) never share it.

Why not a hash of ``[database] sql_alchemy_conn``: Airflow 3 replaces it with
``airflow-db-not-allowed:///`` in every task and trigger process (``block_orm_access``), so every
deployment's workers would compute the same id, the bug this label exists to fix.

A job with no ``airflow-deployment`` label (submitted before this label existed, or by another
tool) has an unknown owner: never cancelled by the reaper nor by ``jobs orphans --cancel``.

May import: nothing of this package; airflow only inside functions.
"""

from __future__ import annotations

import re
import secrets

DEPLOYMENT_LABEL = "airflow-deployment"
SECTION, OPTION = "gpu_sched", "deployment_id"
VARIABLE = "airflow_gpu_sched_deployment_id"
_VALID = re.compile(r"[a-z0-9_-]{1,63}")

THIS, OTHER, UNKNOWN = "this deployment", "other deployment", "unknown"


class DeploymentIdError(ValueError):
    """The deployment id is not a label value, or could not be read."""


def checked(value: str, source: str = f"[{SECTION}] {OPTION} (env AIRFLOW__GPU_SCHED__DEPLOYMENT_ID)") -> str:
    if not _VALID.fullmatch(value):
        raise DeploymentIdError(f"{source} {value!r} is not a label value: 1 to 63 characters, each a lowercase "
                                "letter, a digit, '-' or '_'")
    return value


def configured() -> str | None:
    """``[gpu_sched] deployment_id`` when set (checked), else None."""
    from airflow_gpu_sched import compat

    value = (compat.conf.get(SECTION, OPTION, fallback="") or "").strip()
    return checked(value) if value else None


def from_variable(value: str | None) -> str | None:
    return None if value is None else checked(value.strip(), f"the Variable {VARIABLE}")


def current() -> str:
    """This deployment's id in a task: the option, else the Variable, created if missing (a race
    of two first tasks: the last write wins, and a job labelled with the lost value is another
    deployment's to the reaper: never cancelled, the safe side)."""
    if found := configured():
        return found
    from airflow.sdk import Variable

    try:
        value = Variable.get(VARIABLE, default=None)
        if value is None:
            Variable.set(VARIABLE, "dep-" + secrets.token_hex(8),
                         description="airflow-gpu-sched: this deployment's id, the label airflow-deployment of "
                                     "its jobs (docs/reaper.md). Changed, the jobs labelled before are "
                                     "another deployment's to the reaper: never cancelled.")
            value = Variable.get(VARIABLE)
    except Exception as exc:  # no Execution API (outside a task), refused
        raise DeploymentIdError(f"could not read or create the Variable {VARIABLE} ({type(exc).__name__}: "
                                f"{exc}): set [{SECTION}] {OPTION}") from None
    return from_variable(value)


def read_from_database() -> str | None:
    """This deployment's id where the metadata DB is at hand (the CLI); None when no job has been
    submitted with the Variable yet. Never creates it."""
    if found := configured():
        return found
    from airflow.models.variable import Variable

    return from_variable(Variable.get(VARIABLE, default_var=None))


async def read_from_supervisor(comms) -> str | None:
    """This deployment's id in a triggerer (``comms``: its supervisor); None when unreadable."""
    if found := configured():
        return found
    from airflow.sdk.execution_time.comms import GetVariable

    answer = await comms.asend(GetVariable(key=VARIABLE))
    value = getattr(answer, "value", None)
    return from_variable(value) if isinstance(value, str) else None


def owner(labels: dict[str, str] | None, mine: str) -> str:
    """Whose job it is, by its label: :data:`THIS`, :data:`OTHER` or :data:`UNKNOWN`."""
    value = (labels or {}).get(DEPLOYMENT_LABEL)
    if not value:
        return UNKNOWN
    return THIS if value == mine else OTHER
