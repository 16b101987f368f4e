"""Lockgate as a client of MCP servers: governed capabilities from their tools.

Connection and discovery are MCP's; the consequence is Lockgate's. The MCP adapter
(``python -m lockgate.mcp``) connects to the servers a deployment configures
(``lockgate.mcp.config``), records each server's identity and every discovery snapshot on
the ``LG_MCP`` stream (``lockgate.mcp.records``), keeps new or changed tools in quarantine,
and serves only the tools an operator mapped onto a narrower product capability
(``lockgate.mcp.mapping``), through the adapter SDK (``lockgate.mcp.adapter``). A changed
tool, a vanished one or a changed server identity disables the mapping until it is
reviewed again, and the capability's contract revision changes with it, so the final
gate refuses what was approved under the old one.

Nothing here connects, reads the environment or imports the MCP SDK at import.
"""
