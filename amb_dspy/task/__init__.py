"""One task: its session, the loop that works it, and the tool table every door (MCP, frameworks) wraps."""
