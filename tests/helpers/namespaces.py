"""Temporal namespaces of their own, for tests of what ``setup`` registers in one: a namespace
registered just now on the session's dev server holds none of threadwarden's search
attributes."""

from __future__ import annotations

import uuid

from google.protobuf.duration_pb2 import Duration
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client


async def register_fresh_namespace(temporal: str) -> str:
    """Register a namespace with a unique name on the server at ``temporal``; its name."""
    client = await Client.connect(temporal)
    name = f"ns-{uuid.uuid4().hex[:12]}"
    await client.workflow_service.register_namespace(
        RegisterNamespaceRequest(
            namespace=name, workflow_execution_retention_period=Duration(seconds=86_400)
        )
    )
    return name


async def custom_attributes(temporal: str, namespace: str) -> dict[str, str]:
    """The namespace's custom search attributes, each with its type (``KEYWORD``, ``INT``…)."""
    client = await Client.connect(temporal, namespace=namespace)
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    return {
        name: IndexedValueType.Name(kind).removeprefix("INDEXED_VALUE_TYPE_")
        for name, kind in listed.custom_attributes.items()
    }
