"""An agent-style session against `gpusched mcp`, with the official MCP
Python SDK: list the tools, add a job, wait for a running scheduler to run
it (through the status tool), read its log, cancel a job that does not
exist. Prints one JSON object with what it saw, for tests/it/mcp.rs.

Usage: python client.py GPUSCHED_BINARY LOG_DIR
"""

import asyncio
import json
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main(binary: str, log_dir: str) -> None:
    server = StdioServerParameters(command=binary, args=["mcp", "--log-dir", log_dir])
    seen = {}
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            seen["server"] = init.server_info.name
            tools = await session.list_tools()
            seen["tools"] = sorted(t.name for t in tools.tools)
            added = await session.call_tool(
                "add_job",
                {"command": "echo hello from an agent; echo second line", "name": "agent", "vram": "1G"},
            )
            seen["add_error"] = added.is_error
            seen["added"] = added.structured_content
            deadline = time.time() + 60
            status = None
            while time.time() < deadline:
                result = await session.call_tool("status", {})
                status = result.structured_content
                done = [j for j in status["status"]["jobs"] if j.get("name") == "agent" and j["state"] == "ok"]
                if done:
                    break
                await asyncio.sleep(0.2)
            seen["scheduler_running"] = status["scheduler_running"]
            seen["agent_job"] = next(j for j in status["status"]["jobs"] if j.get("name") == "agent")
            log = await session.call_tool("job_log", {"job": "agent", "lines": 1})
            seen["log"] = log.structured_content
            missing = await session.call_tool("cancel_job", {"job": "99"})
            seen["cancel_error"] = missing.is_error
            seen["cancel_text"] = missing.content[0].text
    print(json.dumps(seen))


asyncio.run(main(sys.argv[1], sys.argv[2]))
