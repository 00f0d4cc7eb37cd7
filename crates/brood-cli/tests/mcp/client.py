"""A real MCP client (the official Python `mcp` SDK, 1.x or 2.x) driving `brood mcp`.

Usage: client.py BROOD_BIN MODEL_BASE_URL WORKSPACE HOME [full | stdio LABEL | http URL LABEL | e2e]
`full` (the default) drives initialize, tools/list, tools/call `task` (three
prompts, with a progress token), `agent_open` + `agent_eval`, a cancelled `task`,
resources/list and resources/read over stdio, checking what a host sees. `stdio
LABEL` and `http URL LABEL` are a short host (one `task` of two prompts named
after LABEL, with progress) over stdio or streamable HTTP, for the several-hosts
test. `e2e` is one `task` for an explore child on a real model (the local
llama.cpp server): it must end `completed`, whatever the tiny model said. Prints one JSON object (ids the Rust test checks in the ledger). Exits
non-zero, naming the failed check, on any mismatch.
"""

import json
import sys
from datetime import timedelta
from importlib.metadata import version

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

MAJOR = int(version("mcp").split(".")[0])


def check(cond, what):
    if not cond:
        raise SystemExit(f"client.py (mcp {version('mcp')}): check failed: {what}")


def wire(obj):
    """A result as it is on the wire (camelCase): 1.x and 2.x name attributes differently."""
    return obj.model_dump(by_alias=True, mode="json", exclude_none=True)


def structured(result):
    result = wire(result)
    check(not result.get("isError"), f"tool call failed: {result['content']}")
    s = result.get("structuredContent")
    check(isinstance(s, dict), f"structuredContent is an object: {s!r}")
    text = result["content"][0]["text"]
    check(json.loads(text) is not None, "text content is the JSON for the model")
    return s


async def cancel_hanging_task(session):
    """Call `task` on a child whose model never answers, then cancel the request
    with notifications/cancelled (2.x: its courtesy cancel on timeout; 1.x: sent
    by hand with the id the session gave the request)."""
    args = {"description": "HANG: wait for an answer that never comes"}
    if MAJOR >= 2:
        try:
            await session.call_tool("task", args, read_timeout_seconds=3.0)
            check(False, "a hanging task returned")
        except Exception:  # the SDK's timeout error; it sent notifications/cancelled
            pass
        return
    rid = session._request_id  # the id the next request gets
    try:
        await session.call_tool("task", args, read_timeout_seconds=timedelta(seconds=3))
        check(False, "a hanging task returned")
    except Exception:
        pass
    await session.send_notification(
        types.ClientNotification(
            types.CancelledNotification(
                params=types.CancelledNotificationParams(requestId=rid, reason="host gave up")
            )
        )
    )


class Progress:
    """Collects a call's notifications/progress; checks they only grow."""

    def __init__(self):
        self.seen = []

    async def __call__(self, progress, total, message):
        if self.seen:
            check(progress > self.seen[-1][0], f"progress grows: {self.seen[-1][0]} then {progress}")
        self.seen.append((progress, message))

    def last(self):
        check(self.seen, "the host heard progress while children ran")
        return self.seen[-1][1] or ""


async def fan_out(session, prompts):
    """One `task` with a progress token; returns (structured results, progress)."""
    progress = Progress()
    s = structured(
        await session.call_tool(
            "task", {"prompts": prompts, "agent_type": "explore"}, progress_callback=progress
        )
    )
    n = len(prompts)
    check(
        progress.last().startswith(f"{n} of {n} sub-agents done, 0 running"),
        f"the last progress says every child is done: {progress.seen}",
    )
    return s, progress


async def short_host(session, label):
    """Initialize and one `task` of two prompts named after `label`."""
    await session.initialize()
    prompts = [f"{label} first", f"{label} second"]
    s, _ = await fan_out(session, prompts)
    for r, p in zip(s["results"], prompts):
        check(r["status"] == "completed", f"{label}: completed: {r}")
        check(r["report"]["summary"] == f"answered {p}", f"{label}: summary {r['report']}")
    return {"label": label, "task_ids": [r["agent_id"] for r in s["results"]]}


async def main():
    brood, base, ws, home = sys.argv[1:5]
    mode = sys.argv[5:] or ["full"]
    params = StdioServerParameters(
        command=brood,
        args=["mcp", "--provider", "local", "--base-url", base, "--model", "m", "--workspace", ws],
        env={"HOME": home, "PATH": "/usr/bin:/bin"},
        cwd=ws,
    )
    out = {"mcp_version": version("mcp")}
    if mode[0] == "http":
        url, label = mode[1], mode[2]
        async with streamable_http_client(url) as streams:
            read, write = streams[0], streams[1]  # 1.x adds a session-id getter
            async with ClientSession(read, write) as session:
                out.update(await short_host(session, label))
        print(json.dumps(out))
        return
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            if mode[0] == "e2e":
                await session.initialize()
                progress = Progress()
                s = structured(
                    await session.call_tool(
                        "task",
                        {"description": "Read README.md and say in one line what the project does.",
                         "agent_type": "explore"},
                        progress_callback=progress,
                    )
                )
                r = s["results"][0]
                check(r["status"] == "completed", f"the real-model child completed: {r}")
                check(progress.last().startswith("1 of 1 sub-agent done"), f"progress: {progress.seen}")
                out["task_ids"] = [r["agent_id"]]
                print(json.dumps(out))
                return
            if mode[0] == "stdio":
                out.update(await short_host(session, mode[1]))
                print(json.dumps(out))
                return
            init = wire(await session.initialize())
            check(init["serverInfo"]["name"] == "brood", f"server name: {init['serverInfo']}")
            check("tools" in init["capabilities"], "tools capability")
            check("resources" in init["capabilities"], "resources capability")

            tools = {t["name"]: t for t in wire(await session.list_tools())["tools"]}
            for name in ["task", "agent_open", "agent_eval", "agent_close", "agent_list", "handle_read"]:
                check(name in tools, f"tool {name} listed")
                check(tools[name]["inputSchema"].get("type") == "object", f"{name} has an object schema")
            check("prompts" in tools["task"]["inputSchema"].get("properties", {}), "task schema has prompts")
            check(tools["agent_list"]["annotations"]["readOnlyHint"] is True, "agent_list is read-only")

            # Blocking fan-out: three prompts, results in prompt order, structured.
            prompts = ["alpha question", "beta question", "gamma question"]
            s, progress = await fan_out(session, prompts)
            out["progress"] = [m for _, m in progress.seen]
            results = s["results"]
            check(len(results) == 3, f"three results: {results}")
            for i, (r, p) in enumerate(zip(results, prompts)):
                check(r["index"] == i, f"result {i} in order")
                check(r["status"] == "completed", f"result {i} completed: {r}")
                check(r["role"] == "explore", f"result {i} ran as explore: {r['role']}")
                rep = r["report"]
                check(rep["summary"] == f"answered {p}", f"result {i} summary: {rep['summary']}")
                check(len(rep["evidence"]) == 1, f"result {i} has its evidence")
                check(r["usage"]["input_tokens"] > 0 or r["usage"]["output_tokens"] >= 0, "usage present")
            out["task_ids"] = [r["agent_id"] for r in results]
            # What each child and the whole call cost, for the Rust test to check.
            out["task_costs"] = [r.get("cost_usd") for r in results]
            out["task_tree_usage"] = [r.get("tree_usage") for r in results]
            out["task_usage"] = s.get("usage")

            # Background child: open returns at once, eval waits for it.
            s = structured(await session.call_tool("agent_open", {"prompt": "delta question", "name": "bg"}))
            bg = s["agent_id"]
            check(s["status"] in ("pending", "queued", "running", "completed"), f"open status: {s['status']}")
            s = structured(await session.call_tool("agent_eval", {"agent_id": bg, "timeout_ms": 60000}))
            agents = s["agents"]
            check(len(agents) == 1 and agents[0]["agent_id"] == bg, f"eval names the child: {agents}")
            check(agents[0]["status"] == "completed", f"background child completed: {agents[0]}")
            check(agents[0]["report"]["summary"] == "answered delta question", "background summary")
            out["open_id"] = bg
            out["eval_cost"] = agents[0].get("cost_usd")

            s = structured(await session.call_tool("agent_list", {}))
            listed = {a["agent_id"] for a in s["agents"]}
            check(set(out["task_ids"]) | {bg} <= listed, f"agent_list shows the runs: {listed}")

            s = structured(await session.call_tool("handle_read", {"handle": f"transcript:{bg}"}))
            check("delta question" in json.dumps(s), "handle_read returns the child's transcript")

            # A bad call is a tool error the host sees, not a protocol failure.
            bad = wire(await session.call_tool("agent_eval", {"agent_id": "no-such-child"}))
            check(bad.get("isError"), "an unknown child is a tool error")
            check("not a sub-agent you opened" in bad["content"][0]["text"], f"error text: {bad['content']}")

            await cancel_hanging_task(session)

            # Runs are resources.
            res = wire(await session.list_resources())["resources"]
            uris = {r["uri"] for r in res}
            for rid in out["task_ids"] + [bg]:
                check(f"brood://runs/{rid}" in uris, f"run {rid} listed as a resource")
            body = await session.read_resource(f"brood://runs/{bg}")
            doc = json.loads(wire(body)["contents"][0]["text"])
            check(doc["run"]["status"] == "completed", f"resource status: {doc['run']['status']}")
            check("delta question" in json.dumps(doc["transcript"]), "resource carries the transcript")
            out["resources"] = len(res)
    print(json.dumps(out))


anyio.run(main)
