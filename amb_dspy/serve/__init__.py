"""``amb serve``: the memory bank as an MCP server (stdio, or streamable HTTP with ``--http PORT``).

:mod:`.server` holds the tools and the transport, :mod:`.registry` the open tasks, :mod:`.command` what
the CLI calls. Nothing here is imported by ``amb --help``: the ``mcp`` SDK loads when the server starts.
"""
