"""`ThreadwardenPlugin` on a user's own Temporal client and workers (a real dev server)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import timedelta

import pytest
from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import DataConverter, PayloadCodec
from temporalio.worker import Worker

from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings
from threadwarden.errors import ThreadwardenError
from threadwarden.worker.plugin import ThreadwardenPlugin
from threadwarden.workflows.host import HostWorkflow
from threadwarden.workflows.sweeper import SweeperWorkflow


@activity.defn
async def user_activity(name: str) -> str:
    return name


class MarkerCodec(PayloadCodec):
    """Stands for a user's payload codec (encryption): the plugin must keep it."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


@pytest.fixture
def plugin(settings: Settings, connections: Connections) -> ThreadwardenPlugin:
    return ThreadwardenPlugin(database=connections.database_url, settings=settings)


async def test_the_plugin_gives_the_client_pydantic_payloads_and_keeps_its_codec(
    plugin: ThreadwardenPlugin, connections: Connections
) -> None:
    codec = MarkerCodec()
    converter = dataclasses.replace(DataConverter.default, payload_codec=codec)
    client = await Client.connect(
        connections.temporal_address, data_converter=converter, plugins=[plugin]
    )
    assert client.data_converter.payload_converter_class is PydanticPayloadConverter
    assert client.data_converter.payload_codec is codec


async def test_only_the_worker_on_threadwardens_task_queue_gets_its_workflows_and_activities(
    plugin: ThreadwardenPlugin, settings: Settings, connections: Connections
) -> None:
    client = await Client.connect(connections.temporal_address, plugins=[plugin])
    mine = Worker(client, task_queue=settings.task_queue, activities=[user_activity])
    other = Worker(client, task_queue=f"{settings.task_queue}-app", activities=[user_activity])
    config = mine.config(active_config=True)
    assert config.get("workflows") == [HostWorkflow, SweeperWorkflow]
    names = {getattr(a, "__name__", "") for a in config.get("activities", [])}
    # run_head too: the heads of inline bindings run there, as local activities (the others
    # on the agent queues' workers)
    assert {"user_activity", "begin_pass", "head_unstarted", "sweep", "run_head"} <= names
    assert other.config(active_config=True).get("workflows") == []
    assert other.config(active_config=True).get("activities") == [user_activity]


async def test_the_plugins_worker_gets_the_sticky_timeout_of_the_settings(
    settings: Settings, connections: Connections
) -> None:
    """A dead worker's hosts wait `sticky_start_timeout_ms` for it, not the SDK's 10 s; the
    application's other workers keep their own."""
    quick = settings.model_copy(update={"sticky_start_timeout_ms": 1_500})
    plugin = ThreadwardenPlugin(database=connections.database_url, settings=quick)
    client = await Client.connect(connections.temporal_address, plugins=[plugin])
    mine = Worker(client, task_queue=settings.task_queue)
    other = Worker(client, task_queue=f"{settings.task_queue}-app", activities=[user_activity])
    sticky = "sticky_queue_schedule_to_start_timeout"
    assert mine.config(active_config=True).get(sticky) == timedelta(milliseconds=1_500)
    assert other.config(active_config=True).get(sticky) == timedelta(seconds=10)


async def test_a_plugin_on_a_worker_whose_client_lacks_it_is_refused_with_a_hint(
    plugin: ThreadwardenPlugin, settings: Settings, connections: Connections
) -> None:
    client = await Client.connect(connections.temporal_address)
    with pytest.raises(ThreadwardenError, match="register the plugin on the Client"):
        Worker(client, task_queue=settings.task_queue, plugins=[plugin])


def test_a_plugin_without_a_database_names_the_field(settings: Settings) -> None:
    with pytest.raises(ThreadwardenError, match="database: expected a DSN or a pool"):
        ThreadwardenPlugin(settings=settings)
