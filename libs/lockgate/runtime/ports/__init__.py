"""The ports a handler talks to the world through: one module per port.

Each module holds the port's ``Protocol`` (what it promises, what it raises), its NATS
implementation and its in-memory fake, side by side (as ``lockgate.eventstore`` holds the
JetStream store and ``MemoryEventStore``); one contract suite runs against both. The
bundle a handler is given is ``lockgate.runtime.context.Ports``; ``MemoryPorts.create``
builds it from the fakes.
"""
