"""Long-running operations (google.longrunning.Operation): what a create or delete answers.

May import: vertex, emulator; never airflow.
"""

from __future__ import annotations

from datetime import datetime

from airflow_gpu_sched.emulator.resources.store import Store, find
from airflow_gpu_sched.vertex.models import Operation
from airflow_gpu_sched.vertex.wire_scalars import format_timestamp


class Operations:
    def __init__(self, store: Store):
        self.store = store
        self.records: dict[str, Operation] = {}

    def start(self, project: str, location: str, metadata_type: str, parent: str | None = None) -> Operation:
        """A new operation, not done, named under ``parent`` (default: the location)."""
        now = self.store.clock.now()
        op = Operation(
            name=f"{parent or f'projects/{project}/locations/{location}'}/operations/{self.store.new_id()}",
            metadata={"@type": f"type.googleapis.com/google.cloud.aiplatform.v1.{metadata_type}",
                      "genericMetadata": {"createTime": format_timestamp(now), "updateTime": format_timestamp(now)}},
            done=False,
        )
        self.records[op.name] = op
        return op

    def finish(self, name: str | None, response: dict, when: datetime | None = None) -> None:
        """Done with ``response``; ``genericMetadata.updateTime`` becomes the finish time (recorded:
        a done operation's updateTime is when it finished, not its createTime)."""
        op = self.records.get(name or "")
        if op is not None:
            op.done = True
            op.response = response
            generic = (op.metadata or {}).get("genericMetadata")
            if isinstance(generic, dict):
                generic["updateTime"] = format_timestamp(when or self.store.clock.now())

    def deleted(self, project: str, location: str) -> dict:
        """A delete's answer: an operation already done, with an empty response."""
        op = self.start(project, location, "DeleteOperationMetadata")
        self.finish(op.name, {"@type": "type.googleapis.com/google.protobuf.Empty"})
        return op.to_api()

    def get(self, name: str) -> dict:
        return find(self.records, name, f'Operation "{name}" does not exist.').to_api()
