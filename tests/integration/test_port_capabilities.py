"""One contract for the capabilities and adapters ports: the fakes and the broker."""

from __future__ import annotations

import msgspec
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import Describe, Facts, FactsRequest, Refusal
from lockgate.core.ids import random_id
from lockgate.runtime.context import MemoryPorts, Ports, ports_for
from lockgate.runtime.ports.adapters import AdapterRefused, AdapterUnavailable
from lockgate.runtime.ports.capabilities import CapabilityRegistry
from lockgate.runtime.settings import Settings
from lockgate.runtime.topology import CAPABILITIES_BUCKET
from lockgate.worlds.casenotes.adapter import CONTRACT


def named(name: str) -> CapabilityContract:
    return msgspec.structs.replace(CONTRACT, name=name)


@pytest.fixture(params=["memory", "nats"])
async def ports(request: pytest.FixtureRequest, nc: Client) -> Ports:
    if request.param == "memory":
        return MemoryPorts.create()
    made = await ports_for(nc, Settings(manage_topology=True, adapter_timeout_s=0.3))
    made.registry = CapabilityRegistry(await made.js.key_value(CAPABILITIES_BUCKET), ttl_s=0.0,
                                       js=made.js)
    return made


async def register(ports: Ports, contract: CapabilityContract) -> None:
    described = Describe(contract=contract, adapter="test")
    if isinstance(ports, MemoryPorts):
        ports.registry.register(described)
    else:
        kv = await ports.js.key_value(CAPABILITIES_BUCKET)
        await kv.put(contract.name, msgspec.json.encode(described))


async def test_a_registered_capability_is_found_by_name(ports: Ports) -> None:
    name = f"port.c{random_id()[:12]}"
    assert await ports.registry.get(name) is None
    await register(ports, named(name))
    contract = await ports.registry.get(name)
    assert contract is not None and contract.name == name
    registration = await ports.registry.registration(name)
    assert registration is not None and registration.adapter == "test"
    assert name in await ports.registry.names()
    assert await ports.registry.get("not a name") is None


async def test_listing_the_names_leaves_no_consumer_behind(nc: Client) -> None:
    """A turn lists the names: a thousand turns in a few minutes must not fill the broker's
    consumer limit (nats-py's keys() leaves a consumer per listing)."""
    ports = await ports_for(nc, Settings(manage_topology=True))
    name = f"port.c{random_id()[:12]}"
    await register(ports, named(name))
    for _ in range(50):
        assert name in await ports.registry.names()
    info = await ports.js.stream_info(f"KV_{CAPABILITIES_BUCKET}")
    assert info.state.consumer_count == 0


async def test_an_adapter_that_answers_and_one_that_does_not(ports: Ports, nc: Client) -> None:
    name = f"port.a{random_id()[:12]}"
    request = FactsRequest(tenant="tenant-a", actor="user-42", resource={"id": "case-1"})
    with pytest.raises(AdapterUnavailable):
        await ports.adapters.facts(name, request)

    async def answer(msg: Msg) -> None:
        await msg.respond(msgspec.json.encode(Facts(facts={"asked": True})))

    if isinstance(ports, MemoryPorts):
        ports.adapters.facts_answer = Facts(facts={"asked": True})
    else:
        await nc.subscribe(f"lg.adapter.{name}.facts", cb=answer)
        await nc.flush()
    assert (await ports.adapters.facts(name, request)).facts == {"asked": True}


async def test_an_adapter_s_refusal_is_raised(ports: Ports, nc: Client) -> None:
    name = f"port.r{random_id()[:12]}"
    request = FactsRequest(tenant="tenant-a", actor="user-42", resource={})

    async def refuse(msg: Msg) -> None:
        await msg.respond(b'{"error": "facts.unknown-resource", "detail": "no such case"}')

    if isinstance(ports, MemoryPorts):
        ports.adapters.facts_answer = AdapterRefused(name, msgspec.json.decode(
            b'{"error": "facts.unknown-resource", "detail": "no such case"}', type=Refusal))
    else:
        await nc.subscribe(f"lg.adapter.{name}.facts", cb=refuse)
        await nc.flush()
    with pytest.raises(AdapterRefused, match="facts.unknown-resource"):
        await ports.adapters.facts(name, request)
