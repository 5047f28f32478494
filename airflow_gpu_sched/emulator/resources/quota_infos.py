"""Cloud Quotas' QuotaInfo reads (cloudquotas.googleapis.com v1) over the emulator's quota
limits (emulator/quotas.py); the control API can deny them as IAM does.

May import: vertex, emulator; never airflow.
"""

from __future__ import annotations

from airflow_gpu_sched.emulator.api_errors import ApiError
from airflow_gpu_sched.emulator.quotas import QuotaStore
from airflow_gpu_sched.emulator.resources.listing import MAX_PAGE_SIZE, offset_list
from airflow_gpu_sched.emulator.resources.store import Store


class QuotaInfos:
    def __init__(self, store: Store, quotas: QuotaStore):
        self.store = store
        self.quotas = quotas

    def list(self, project: str, service: str, page_size: int | None = None, page_token: str = "") -> dict:
        if self.quotas.deny:
            raise ApiError(
                "PERMISSION_DENIED",
                f"Permission 'cloudquotas.quotas.get' denied on resource 'projects/{project}/locations/global/"
                f"services/{service}' (or it may not exist).",
                [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "IAM_PERMISSION_DENIED",
                  "domain": "cloudquotas.googleapis.com",
                  "metadata": {"permission": "cloudquotas.quotas.get"}}])
        metrics = self.quotas.metrics() if service == "aiplatform.googleapis.com" else []
        return offset_list(metrics, "quotaInfos", ("quotaInfos", project, service), page_size, page_token,
                           self.store.scenario.variants.list_pages, lambda m: self.quotas.quota_info(project, m))

    def get(self, project: str, service: str, quota_id: str) -> dict:
        listed, token = [], ""
        while True:  # every page (under variants.listPages: short the first one is empty)
            page = self.list(project, service, MAX_PAGE_SIZE, token)
            listed += page.get("quotaInfos", [])
            if not (token := page.get("nextPageToken", "")):
                break
        found = next((q for q in listed if q["quotaId"] == quota_id), None)
        if found is None:
            raise ApiError("NOT_FOUND", f"QuotaInfo {quota_id} of {service} does not exist.")
        return found
