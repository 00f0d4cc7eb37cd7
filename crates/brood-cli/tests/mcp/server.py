"""A small real MCP server for brood's client tests (tests/mcp_client.rs),
written with the official Python SDK (MCPServer in mcp 2.x, FastMCP in 1.x),
served over stdio.

Tools:
- lookup (readOnlyHint: true): answers LOOKUP <key> from pid <pid>
- deploy (readOnlyHint: false): answers DEPLOYED <target>
- crash: the process exits in the middle of the call

Every start appends a line to the file named by BROOD_TEST_STARTS (if set), so a
test can count (re)starts.
"""

import os

try:
    from mcp.server.mcpserver import MCPServer as Server  # mcp 2.x
except ImportError:
    from mcp.server.fastmcp import FastMCP as Server  # mcp 1.x
from mcp.types import ToolAnnotations

server = Server("brood-test")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def lookup(key: str) -> str:
    """Look a key up; changes nothing."""
    return f"LOOKUP {key} from pid {os.getpid()}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
def deploy(target: str) -> str:
    """Deploy a target; changes things."""
    return f"DEPLOYED {target}"


@server.tool()
def crash(why: str) -> str:
    """Exit the server process in the middle of the call."""
    os._exit(3)


if __name__ == "__main__":
    starts = os.environ.get("BROOD_TEST_STARTS")
    if starts:
        with open(starts, "a") as f:
            f.write(f"{os.getpid()}\n")
    server.run()
