"""When the supervisor of a cluster hands the events partitions' leaderships back.

Partition k belongs on node k mod N (``spread_leaders``); a node that was killed, frozen
or restarted lost its leaderships to the others and does not get them back by itself.
``misplaced_leaders`` names what may be moved back, and only when moving is safe.
"""

from __future__ import annotations

from lockgate.eventstore.partitions import Partitions
from lockgate.operations.cluster import (
    ClusterReport,
    HandBack,
    NodeState,
    ReplicaState,
    StreamState,
    misplaced_leaders,
)

NODES = ["n1", "n2", "n3"]
K3 = Partitions(3)


def node(name: str, *, up: bool = True, healthy: bool = True) -> NodeState:
    return NodeState(name=name, url=f"nats://{name}", up=up, healthy=healthy)


def stream(name: str, leader: str, *, lagging: tuple[str, ...] = ()) -> StreamState:
    return StreamState(stream=name, leader=leader, replicas=[
        ReplicaState(name=n, current=n not in lagging) for n in NODES if n != leader])


def report(leaders: dict[str, str], *, nodes: list[NodeState] | None = None,
           lagging: tuple[str, ...] = ()) -> ClusterReport:
    return ClusterReport(
        nodes=nodes if nodes is not None else [node(n) for n in NODES],
        streams=[stream(s, leader, lagging=lagging) for s, leader in leaders.items()]
        + [stream("LG_CANDIDATES", "n2")])


def test_partitions_on_their_nodes_need_nothing_whoever_leads_the_rest() -> None:
    # LG_CANDIDATES is led by n2 in every report here: only the partitions are spread.
    spread = {"LG_EVENTS_0": "n1", "LG_EVENTS_1": "n2", "LG_EVENTS_2": "n3"}
    assert misplaced_leaders(report(spread), K3, NODES) == {}


def test_a_partition_that_lost_its_node_goes_back_to_it() -> None:
    # n1 was killed: its partition moved to n2 and stays there once n1 is back.
    after = {"LG_EVENTS_0": "n2", "LG_EVENTS_1": "n2", "LG_EVENTS_2": "n3"}
    assert misplaced_leaders(report(after), K3, NODES) == {"LG_EVENTS_0": "n1"}


def test_nothing_moves_while_a_node_is_down_or_unhealthy() -> None:
    after = {"LG_EVENTS_0": "n2", "LG_EVENTS_1": "n2", "LG_EVENTS_2": "n3"}
    down = [node("n1", up=False), node("n2"), node("n3")]
    catching_up = [node("n1", healthy=False), node("n2"), node("n3")]
    assert misplaced_leaders(report(after, nodes=down), K3, NODES) == {}
    assert misplaced_leaders(report(after, nodes=catching_up), K3, NODES) == {}
    assert misplaced_leaders(report(after, nodes=[]), K3, NODES) == {}


def test_nothing_moves_to_a_replica_that_is_behind() -> None:
    after = {"LG_EVENTS_0": "n2", "LG_EVENTS_1": "n2", "LG_EVENTS_2": "n3"}
    assert misplaced_leaders(report(after, lagging=("n1",)), K3, NODES) == {}


def test_one_partition_or_one_node_has_nothing_to_spread() -> None:
    assert misplaced_leaders(report({"LG_EVENTS": "n2"}), Partitions(1), NODES) == {}
    assert misplaced_leaders(report({"LG_EVENTS_0": "n2"}), K3, ["n1"]) == {}


def test_a_hand_back_is_due_only_once_the_same_misplacement_has_lasted() -> None:
    moves = {"LG_EVENTS_0": "n1"}
    waiting = HandBack(after_s=30.0)
    assert waiting.due(moves, now=100.0) == {}  # first seen
    assert waiting.due(moves, now=129.0) == {}
    assert waiting.due(moves, now=130.0) == moves  # lasted 30 s
    assert waiting.due(moves, now=131.0) == {}  # handed back: wait again
    assert waiting.due({}, now=140.0) == {}  # settled by itself
    assert waiting.due(moves, now=141.0) == {} and waiting.due(moves, now=171.0) == moves
    waiting.due(moves, now=200.0)
    waiting.reset()  # a node went down: what was seen before does not count
    assert waiting.due(moves, now=231.0) == {} and waiting.due(moves, now=261.0) == moves
