"""Containment measured on AgentDojo, model-free: its ground truth replayed through Lockgate.

AgentDojo (the ``agentdojo`` package, the ``agentdojo`` extra) is a benchmark of
tool-using agents under prompt injection: suites of tools acting on an environment, user
tasks and injection tasks with their ground-truth calls, and the suite's own checks of
utility and security. Here a suite's tools become capabilities (``tools``, ``suites``),
its ground truth is proposed through a private system (``deployment``, ``governed``) by a
model that obeys every injection (``replay``), and the suite's checks score the
environments the runs left (``runner``, ``report``). ``lockgate eval --agentdojo SUITE``
runs it.
"""
