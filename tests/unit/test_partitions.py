"""K events streams: which holds an intent, how their subjects read, who may touch them."""

from __future__ import annotations

import zlib
from collections import Counter

import pytest
from pydantic import ValidationError

from lockgate.eventstore.partitions import Partitions
from lockgate.eventstore.subjects import event_subject, parse_event_subject
from lockgate.operations.roles import archiver_role, projector_role, service_role
from lockgate.runtime.settings import Settings
from lockgate.runtime.specs import POLICY
from lockgate.runtime.topology import DURABLES, durables_on, stream_configs, topology_streams


def test_one_partition_is_the_stream_as_it_always_was() -> None:
    [only] = list(Partitions())
    assert (only.stream, only.prefix) == ("LG_EVENTS", "lg.evt")
    assert durables_on(Partitions()) == DURABLES
    assert [c.name for c in stream_configs()][0] == "LG_EVENTS"


def test_the_partition_is_a_stable_hash_of_the_intent_id() -> None:
    parts = Partitions(3)
    ids = [f"{n:032x}" for n in range(3000)]
    assert all(parts.index_of(i) == zlib.crc32(i.encode()) % 3 for i in ids)
    spread = Counter(parts.index_of(i) for i in ids)
    assert set(spread) == {0, 1, 2} and min(spread.values()) > 900  # about a third each
    assert [p.stream for p in parts] == ["LG_EVENTS_0", "LG_EVENTS_1", "LG_EVENTS_2"]
    assert parts.of(ids[0]).prefix == f"lg.evt.p{parts.index_of(ids[0])}"


def test_a_partitioned_subject_parses_like_any_other() -> None:
    subject = event_subject("tenant-a", "abc", 3, "PolicyDecided", "allow", prefix="lg.evt.p2")
    assert subject == "lg.evt.p2.tenant-a.abc.3.PolicyDecided.allow"
    address = parse_event_subject(subject)
    assert (address.tenant, address.intent_id, address.version, address.route) == ("tenant-a", "abc", 3, "allow")
    # A tenant that happens to be called like a partition is still a tenant.
    plain = parse_event_subject("lg.evt.p2.abc.3.CandidateReceived._")
    assert (plain.tenant, plain.intent_id) == ("p2", "abc")


def test_every_events_consumer_has_its_durable_on_every_partition() -> None:
    parts = Partitions(3)
    placed = durables_on(parts)
    for d in DURABLES:
        if d.stream != "LG_EVENTS":
            assert d in placed
            continue
        mine = [p for p in placed if p.name == d.name and p.stream.startswith("LG_EVENTS_")]
        assert [p.stream for p in mine] == list(parts.streams), d.name
        for p, part in zip(mine, parts, strict=True):
            assert p.filters and all(f.startswith(part.prefix + ".") for f in p.filters), p
    assert not any(p.stream == "LG_EVENTS" for p in placed)
    assert set(parts.streams) <= set(topology_streams(parts)) and "LG_EVENTS" not in topology_streams(parts)


def test_roles_reach_every_partition_and_the_one_stream_no_more() -> None:
    parts = Partitions(3)
    policy = service_role(POLICY.name, parts)
    for part in parts:
        assert f"$JS.API.CONSUMER.MSG.NEXT.{part.stream}.policy" in policy.publish
        assert f"$JS.API.DIRECT.GET.{part.stream}" in policy.publish
        assert f"$JS.API.STREAM.MSG.GET.{part.stream}" in policy.publish
        assert f"{part.prefix}.*.*.*.PolicyDecided.*" in policy.publish
        assert f"$JS.API.STREAM.PURGE.{part.stream}" in archiver_role(parts).publish
        assert f"$JS.API.STREAM.INFO.{part.stream}" in projector_role(parts).publish
    assert not [s for s in policy.publish if "LG_EVENTS." in s or s.startswith("lg.evt.*")]
    # Policy still appends only what it appends.
    assert not [s for s in policy.publish if s.endswith(".CandidateReceived.*")]


def test_a_deployment_says_how_many_partitions() -> None:
    assert Settings(event_partitions=3).partitions == Partitions(3)
    with pytest.raises(ValidationError):
        Settings(event_partitions=0)
    with pytest.raises(ValueError, match="1..64"):
        Partitions(65)
