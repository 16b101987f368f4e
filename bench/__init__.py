"""Lockgate's benchmark: the executed path through every service against a raw JetStream chain.

``make bench`` (``python -m bench``) starts the whole system on a private nats-server
in a temporary directory, and on the same server a chain of six plain nats-py durable
pull consumers that each load and append with the same ``JetStreamEventStore``. Both
are driven the same way: open loop at a fixed arrival rate (latency) and closed loop
with a fixed number of concurrent proposers (throughput). Lockgate's figure is
reported as a ratio to the chain's, measured in the same run. ``--profile`` runs the
same comparison on the local three-node cluster too (``bench.profiles``), the chain
partitioned and replicated as Lockgate's events are.

Nothing here asserts on time: the benchmark reports, it does not judge.
"""
