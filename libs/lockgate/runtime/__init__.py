"""The kit that runs inside a Lockgate process: settings, every process's spec and the broker
topology derived from it, the service kit (consumers, settling, the intent store), metrics and
traces. What makes and runs a deployment from outside is ``lockgate.operations``."""
