"""Git tools nobody here wrote, governed by Lockgate with nothing but ``@capability``.

The functions are the ``mcp-server-git`` package's own (``mcp_server_git.server``), wrapped
unchanged in ``lockgate.worlds.gittools.capabilities``; their policies are in
``deploy/policies/gittools/``. Serve them beside ``make run`` with::

    lockgate adapter serve lockgate.worlds.gittools.capabilities --name gittools

and open runs whose context names the repository (``{"repository": "/path/to/repo"}``).
"""
