"""The contained agent of glove run's tests: the Python MCP SDK's stdio
client, running Glove's relay as its server. Usage:
    mcp_sdk.py SERVER legacy|modern TOOL JSON_ARGUMENTS
Prints one JSON line: the revision, the listed tool names and the call's
result (or the error the SDK raised)."""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main(server, revision, tool, arguments):
    params = StdioServerParameters(
        command="/run/glove/bin/glove", args=["mcp-relay", server], env={}
    )
    out = {"revision": revision}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            if revision == "modern":
                d = await session.discover()
                out["supported"] = list(d.supported_versions)
            else:
                i = await session.initialize()
                out["protocol"] = i.protocol_version
            tools = await session.list_tools()
            out["tools"] = sorted(t.name for t in tools.tools)
            try:
                r = await session.call_tool(tool, json.loads(arguments))
                out["is_error"] = bool(r.is_error)
                out["text"] = [c.text for c in r.content if getattr(c, "text", None) is not None]
            except Exception as e:  # the SDK raises JSON-RPC errors
                err = getattr(e, "error", None)
                out["error"] = {
                    "code": getattr(err, "code", None),
                    "message": str(e),
                    "data": getattr(err, "data", None),
                }
    print(json.dumps(out), flush=True)


asyncio.run(asyncio.wait_for(main(*sys.argv[1:5]), 60))
