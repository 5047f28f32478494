"""Persistent resources and operations as the service writes them (issue 40): proto3 JSON with no
default of a field without presence, pools with their generated ``id`` and the server-filled
``diskSpec``, an operation's ``updateTime`` at its finish, and ``persistentResources.patch`` of
``resource_pools.replica_count`` only. Raw HTTP at the wire, and Google's own SDK for the PATCH."""

from __future__ import annotations

import pytest
import requests

from tests.conftest import LOCATION, PROJECT

PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
A100 = {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}
NAME = f"{PARENT}/persistentResources/pool-a"


def call(emulator, method: str, path: str, expect: int = 200, **kw) -> dict:
    response = requests.request(method, f"{emulator.url}/v1/{path}", timeout=10, **kw)
    assert response.status_code == expect, response.text
    return response.json()


def create(emulator, pools: list[dict]) -> dict:
    return call(emulator, "POST", f"{PARENT}/persistentResources", params={"persistentResourceId": "pool-a"},
                json={"resourcePools": pools})


def patch(emulator, pools: list[dict], mask: str | None = "resource_pools.replica_count", expect: int = 200) -> dict:
    params = {} if mask is None else {"updateMask": mask}
    return call(emulator, "PATCH", NAME, expect, params=params, json={"name": NAME, "resourcePools": pools})


def test_pools_come_back_with_their_generated_id_and_the_server_filled_disk(emulator):
    op = create(emulator, [{"replicaCount": "2", "machineSpec": A100},
                           {"id": "pool-0", "replicaCount": "1", "machineSpec": A100,
                            "diskSpec": {"bootDiskSizeGb": 200}}])
    assert "done" not in op  # recorded: an operation not yet done has no "done" key at all
    pools = call(emulator, "GET", NAME)["resourcePools"]
    assert [(p["id"], p["diskSpec"]) for p in pools] == [
        ("pool-1", {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100}),  # pool-0 was the user's
        ("pool-0", {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 200})]
    assert all("usedReplicaCount" not in p for p in pools)  # an idle pool: 0 is not printed


def test_an_operations_update_time_is_its_finish_time(emulator):
    op = create(emulator, [{"id": "a100s", "replicaCount": "1", "machineSpec": A100}])
    created = op["metadata"]["genericMetadata"]
    assert created["updateTime"] == created["createTime"]
    emulator.advance(61)
    done = call(emulator, "GET", op["name"])
    resource = call(emulator, "GET", NAME)
    assert done["done"] is True and done["metadata"]["genericMetadata"]["createTime"] == created["createTime"]
    assert done["metadata"]["genericMetadata"]["updateTime"] == resource["startTime"] != created["createTime"]


def test_an_empty_list_answers_an_empty_object(emulator):
    assert call(emulator, "GET", f"{PARENT}/persistentResources") == {}
    assert call(emulator, "GET", f"{PARENT}/customJobs") == {}
    assert call(emulator, "GET", f"{PARENT}/trainingPipelines") == {}


def test_patch_updates_the_replica_count_through_an_operation(emulator):
    create(emulator, [{"id": "a100s", "replicaCount": "1", "machineSpec": A100}])
    emulator.advance(61)
    op = patch(emulator, [{"id": "a100s", "replicaCount": "3", "machineSpec": A100}])
    assert op["name"].startswith(f"{NAME}/operations/") and "done" not in op
    assert op["metadata"]["@type"] == "type.googleapis.com/google.cloud.aiplatform.v1.UpdatePersistentResourceOperationMetadata"
    updating = call(emulator, "GET", NAME)
    assert updating["state"] == "UPDATING" and updating["resourcePools"][0]["replicaCount"] == "1"
    emulator.advance(61)
    done = call(emulator, "GET", op["name"])
    assert done["done"] is True and done["response"]["resourcePools"][0]["replicaCount"] == "3"
    resource = call(emulator, "GET", NAME)
    assert resource["state"] == "RUNNING" and resource["resourcePools"][0]["replicaCount"] == "3"
    assert done["metadata"]["genericMetadata"]["updateTime"] == resource["updateTime"]
    # the FieldMask's JSON form (lowerCamelCase) is the same path
    emulator.advance(1)
    assert "name" in patch(emulator, [{"replicaCount": "2"}], mask="resourcePools.replicaCount")


@pytest.mark.parametrize(("mask", "pools", "status", "field"), [
    ("displayName", [{"replicaCount": "2"}], "INVALID_ARGUMENT", "updateMask"),
    ("resource_pools.replica_count,labels", [{"replicaCount": "2"}], "INVALID_ARGUMENT", "updateMask"),
    (None, [{"replicaCount": "2"}], "INVALID_ARGUMENT", "updateMask"),
    ("resource_pools.replica_count", [{"replicaCount": "0"}], "INVALID_ARGUMENT", "resourcePools[0].replicaCount"),
    ("resource_pools.replica_count", [{"id": "other", "replicaCount": "2"}], "INVALID_ARGUMENT",
     "resourcePools[0].id"),
    ("resource_pools.replica_count", [{"replicaCount": "2"}, {"replicaCount": "2"}], "INVALID_ARGUMENT",
     "resourcePools"),
])
def test_patch_refuses_anything_but_the_replica_count_naming_the_field(emulator, mask, pools, status, field):
    create(emulator, [{"id": "a100s", "replicaCount": "1", "machineSpec": A100}])
    emulator.advance(61)
    error = patch(emulator, pools, mask, expect=400)["error"]
    assert error["status"] == status
    assert [v["field"] for v in error["details"][0]["fieldViolations"]] == [field]
    assert call(emulator, "GET", NAME)["state"] == "RUNNING"  # nothing changed


def test_patch_of_a_resource_still_provisioning_is_a_failed_precondition(emulator):
    create(emulator, [{"id": "a100s", "replicaCount": "1", "machineSpec": A100}])
    error = patch(emulator, [{"replicaCount": "2"}], expect=400)["error"]
    assert error["status"] == "FAILED_PRECONDITION" and "PROVISIONING" in error["message"]


def test_googles_sdk_updates_the_replica_count_as_ray_on_vertex_does(emulator):
    """Google's SDK (Ray on Vertex's update_ray_cluster) sends the whole resource it read, its
    pools' replica counts changed, with the mask ``resource_pools.replica_count``."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform_v1 as v1
    from google.protobuf import field_mask_pb2

    client = v1.PersistentResourceServiceClient(transport="rest", credentials=AnonymousCredentials(),
                                                client_options={"api_endpoint": emulator.url})
    create(emulator, [{"replicaCount": "1", "machineSpec": A100}])
    emulator.advance(61)
    current = client.get_persistent_resource(name=NAME)
    assert current.resource_pools[0].id == "pool-0" and current.resource_pools[0].used_replica_count == 0
    current.resource_pools[0].replica_count = 2
    operation = client.update_persistent_resource(
        persistent_resource=current, update_mask=field_mask_pb2.FieldMask(paths=["resource_pools.replica_count"]))
    assert not operation.done()
    emulator.advance(61)
    updated = operation.result(timeout=30)
    assert updated.state == v1.PersistentResource.State.RUNNING and updated.resource_pools[0].replica_count == 2
    with pytest.raises(Exception, match="Unrecognized path"):
        client.update_persistent_resource(persistent_resource=current,
                                          update_mask=field_mask_pb2.FieldMask(paths=["display_name"]))
