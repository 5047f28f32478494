"""Which query parameters each served method takes; anything else is refused, as Google's front end does.

The table is vendored from the aiplatform v1 discovery document (each method's ``parameters`` of
``location: query``) and, for the Cloud Quotas routes, from ``ListQuotaInfosRequest`` /
``GetQuotaInfoRequest`` of google-cloud-quotas; ``tests/test_emulator_methods.py`` checks it
against both so it cannot drift. The emulator must not import googleapiclient at run time, hence
the copy.

System parameters are accepted on every method: the discovery document's global ``parameters``
(``$.xgafv``, ``alt``, ``fields``, ``key``, ``prettyPrint``, ``quotaUser``, ...), each also with the
``$`` prefix Google's system-parameters page documents ("a system parameter ``$foo`` is sent as
``?$foo=xxx``"; Google's generated REST clients send ``$alt=json;enum-encoding=int``), plus
``$apiVersion`` and ``$ct`` from that page. The emulator ignores their values.

The refusal's wording is Google's front end's for an unbound query parameter, as reported by
users (assumed verbatim; not checked against the live service by this project):
``Invalid JSON payload received. Unknown name "foo": Cannot bind query parameter. Field 'foo'
could not be found in request message.``

May import: emulator; never airflow.
"""

from __future__ import annotations

from collections.abc import Iterable

from airflow_gpu_sched.emulator.api_errors import ApiError

# aiplatform v1 discovery document, global "parameters" (revision 20261106)
GLOBAL_PARAMETERS = frozenset({
    "$.xgafv", "access_token", "alt", "callback", "fields", "key", "oauth_token", "prettyPrint",
    "quotaUser", "uploadType", "upload_protocol"})
SYSTEM_PARAMETERS = GLOBAL_PARAMETERS | {f"${p}" for p in GLOBAL_PARAMETERS if not p.startswith("$")} | {
    "$apiVersion", "$ct"}

_LIST = ("filter", "pageSize", "pageToken", "readMask")
# rpc (as urls.ROUTES names it) -> the method's own query parameters
QUERY_PARAMETERS: dict[str, tuple[str, ...]] = {
    "customJobs.create": (),
    "customJobs.list": _LIST,
    "customJobs.get": (),
    "customJobs.cancel": (),
    "customJobs.delete": (),
    "persistentResources.create": ("persistentResourceId",),
    "persistentResources.list": ("pageSize", "pageToken"),  # no filter, no readMask
    "persistentResources.get": (),
    "persistentResources.delete": (),
    "persistentResources.patch": ("updateMask",),
    "operations.get": (),
    "persistentResources.operations.get": (),
    "hyperparameterTuningJobs.create": (),
    "hyperparameterTuningJobs.list": _LIST,
    "hyperparameterTuningJobs.get": (),
    "hyperparameterTuningJobs.cancel": (),
    "hyperparameterTuningJobs.delete": (),
    "trainingPipelines.create": (),
    "trainingPipelines.list": _LIST,
    "trainingPipelines.get": (),
    "trainingPipelines.cancel": (),
    "trainingPipelines.delete": (),
    "models.list": ("filter", "orderBy", "pageSize", "pageToken", "readMask"),
    "models.get": (),
    # Cloud Quotas v1 (another API, same system parameters)
    "quotaInfos.list": ("pageSize", "pageToken"),
    "quotaInfos.get": (),
}
CLOUD_QUOTAS_RPCS = frozenset({"quotaInfos.list", "quotaInfos.get"})


def unknown_parameter_error(name: str) -> ApiError:
    message = (f'Invalid JSON payload received. Unknown name "{name}": Cannot bind query parameter. '
               f"Field '{name}' could not be found in request message.")
    return ApiError("INVALID_ARGUMENT", message, details=[{
        "@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": [{"description": message}]}])


def query_refusal(rpc: str, names: Iterable[str]) -> ApiError | None:
    """The 400 for the first query parameter ``rpc`` does not take, or None. An rpc missing from
    the table is not checked (a test keeps the table covering every route)."""
    own = QUERY_PARAMETERS.get(rpc)
    if own is None:
        return None
    for name in names:
        if name not in own and name not in SYSTEM_PARAMETERS:
            return unknown_parameter_error(name)
    return None
