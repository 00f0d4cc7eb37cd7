"""A small real MCP server for brood's client tests (tests/mcp/client.rs),
written with the official Python SDK (MCPServer in mcp 2.x, FastMCP in 1.x),
served over stdio, or with `--http PORT` over streamable HTTP on 127.0.0.1
(PORT 0: any free port). In HTTP mode it prints `LISTENING <port>` on stdout once
its socket listens; with BROOD_TEST_TOKEN set it answers 401 to any request
without `Authorization: Bearer <that token>`, and with BROOD_TEST_HEADERS set it
appends each request's `authorization`, `mcp-session-id` and `x-*` headers
to that file as JSON.

Tools:
- lookup (readOnlyHint: true): answers LOOKUP <key> from pid <pid>
- deploy (readOnlyHint: false): answers DEPLOYED <target>
- crash: the process exits in the middle of the call

Every start appends a line to the file named by BROOD_TEST_STARTS (if set), so a
test can count (re)starts. With BROOD_TEST_RELIST=1, a start that is not the first
(that file already has a line) offers other tools: `lookup` under a new
description, `added` (readOnlyHint: true; answers ADDED <key>), and no `deploy`.
"""

import json
import os
import sys

try:
    from mcp.server.mcpserver import MCPServer as Server  # mcp 2.x
except ImportError:
    from mcp.server.fastmcp import FastMCP as Server  # mcp 1.x
from mcp.types import ToolAnnotations

server = Server("brood-test")


def _restarted():
    starts = os.environ.get("BROOD_TEST_STARTS")
    if os.environ.get("BROOD_TEST_RELIST") != "1" or not starts:
        return False
    try:
        with open(starts) as f:
            return bool(f.read().strip())
    except FileNotFoundError:
        return False


RESTARTED = _restarted()


def lookup(key: str) -> str:
    return f"LOOKUP {key} from pid {os.getpid()}"


server.tool(
    annotations=ToolAnnotations(readOnlyHint=True),
    description="Look a key up (second edition)." if RESTARTED else "Look a key up; changes nothing.",
)(lookup)

if RESTARTED:

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def added(key: str) -> str:
        """A tool offered only after a restart."""
        return f"ADDED {key}"

else:

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
    def deploy(target: str) -> str:
        """Deploy a target; changes things."""
        return f"DEPLOYED {target}"


@server.tool()
def crash(why: str) -> str:
    """Exit the server process in the middle of the call."""
    os._exit(3)


def require_token(app, token, log):
    """The ASGI app, refusing requests without the bearer token."""

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            if log:
                seen = {
                    k: v
                    for k, v in headers.items()
                    if k in ("authorization", "mcp-session-id") or k.startswith("x-")
                }
                with open(log, "a") as f:
                    f.write(json.dumps(seen) + "\n")
            if token and headers.get("authorization") != f"Bearer {token}":
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"text/plain"),
                            (b"www-authenticate", b'Bearer realm="brood-test"'),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": b"bearer token required"})
                return
        await app(scope, receive, send)

    return guarded


def serve_http(port):
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    app = require_token(
        server.streamable_http_app(),
        os.environ.get("BROOD_TEST_TOKEN"),
        os.environ.get("BROOD_TEST_HEADERS"),
    )
    print(f"LISTENING {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    starts = os.environ.get("BROOD_TEST_STARTS")
    if starts:
        with open(starts, "a") as f:
            f.write(f"{os.getpid()}\n")
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        serve_http(int(sys.argv[2]))
    else:
        server.run()
