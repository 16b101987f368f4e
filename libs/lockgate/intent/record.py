"""Lockgate's record of intents as an ``eventsourcing`` Application, for projections.

``LockgateRecord`` reads the events stream through ``JetStreamApplicationRecorder``
and maps each stored event to its ``EffectIntent`` event with ``codec.decode_event``
(Lockgate stores msgspec JSON, not the library's transcoder format). So the library's
``ApplicationSubscription(LockgateRecord(), gt=...)`` and ``ProjectionRunner`` yield
``(EffectIntent.<Event>, Tracking("LockgateRecord", stream_sequence))`` for the events
Lockgate's services append, in store order, and go on with new ones as they are stored.

Only an intent's first event (``CandidateReceived``, ``CandidateRejected``) carries its
``tenant`` as a field; for the others, ``LockgateRecord.tenant_of(event.originator_id)``
answers from the subjects the subscription read. The record is read-only for Lockgate's
events: each is appended by the service that owns its type.
"""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import (
    InfrastructureFactory,
    Mapper,
    MapperDeserialisationError,
    Notification,
    StoredEvent,
)
from eventsourcing.utils import Environment, get_topic

from lockgate.eventstore.base import RecordedEvent
from lockgate.eventstore.recorder import Factory, JetStreamApplicationRecorder
from lockgate.intent.aggregate import Event
from lockgate.intent.codec import EventDecodeError, decode_event, encode_event, event_type_of


class LockgateMapper(Mapper[UUID]):
    """Maps Lockgate's stored events with its own codec; other topics as the library does."""

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEventProtocol[UUID]:
        """The ``EffectIntent`` event of a stored Lockgate event (upcast to its class's
        current version), or another application's event as the library maps it.

        Raises:
            MapperDeserialisationError: a Lockgate event whose type or bytes this code does
                not know (never skipped: a projection must not lose an event silently).
        """
        event_type = event_type_of(stored_event.topic)
        if event_type is None:
            return super().to_domain_event(stored_event)
        originator = stored_event.originator_id
        recorded = RecordedEvent(
            tenant="",
            intent_id=originator.hex if isinstance(originator, UUID) else originator,
            version=stored_event.originator_version,
            event_type=event_type,
            event_id="",
            data=stored_event.state,
            sequence=stored_event.id if isinstance(stored_event, Notification) else 0,
        )
        try:
            return cast(DomainEventProtocol[UUID], decode_event(recorded))
        except EventDecodeError as exc:
            raise MapperDeserialisationError(
                f"stored event {originator} v{stored_event.originator_version}: {exc}"
            ) from exc

    def to_stored_event(self, domain_event: DomainEventProtocol[UUID]) -> StoredEvent:
        """A Lockgate event as Lockgate stores it (the recorder refuses to insert it: its
        service appends it); another application's event as the library stores it."""
        if isinstance(domain_event, Event):
            return StoredEvent(
                originator_id=domain_event.originator_id,
                originator_version=domain_event.originator_version,
                topic=get_topic(type(domain_event)),
                state=encode_event(domain_event).data,
            )
        return super().to_stored_event(domain_event)


class LockgateRecord(Application[UUID]):
    """The events stream as a library Application: what projections subscribe to.

    Always on JetStream (``lockgate.eventstore.recorder.Factory``, configured by its
    ``LOCKGATE_*`` environment), whatever ``PERSISTENCE_MODULE`` says: that one is left
    to the projection's views (``eventsourcing.sqlite``, ``eventsourcing.postgres``).
    """

    recorder: JetStreamApplicationRecorder

    def construct_factory(self, env: Environment) -> InfrastructureFactory[Any]:
        """The JetStream factory, never the one ``PERSISTENCE_MODULE`` names."""
        return Factory(env)

    def construct_mapper(self) -> Mapper[UUID]:
        """Lockgate's codec for Lockgate's events."""
        return self.factory.mapper(transcoder=self.construct_transcoder(), mapper_class=LockgateMapper)

    def construct_recorder(self) -> JetStreamApplicationRecorder:
        """The events stream's recorder."""
        factory = self.factory
        if not isinstance(factory, Factory):
            raise TypeError(f"{type(self).__name__} records on JetStream, not with {factory!r}")
        return factory.application_recorder()

    def tenant_of(self, intent: UUID) -> str | None:
        """The tenant of an intent (``None`` when the record holds none of its events).

        Raises:
            OperationalError: the server did not answer (only asked for an intent no
                event read lately named).
        """
        return self.recorder.tenant_of(intent)
