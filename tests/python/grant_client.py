"""A second, independent MCP client (the Python SDK) that answers warden's consent
prompt through an elicitation callback, then reads the granted file from the sandbox.

usage: grant_client.py WARDEN_BINARY GRANTED_DIR   (prints ASKED/GRANTED/READ lines)
"""
import asyncio
import os
import sys

import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ASKED = []


async def elicitation_callback(context, params):
    ASKED.append(params.message)
    return types.ElicitResult(action="accept", content={"approve": True})


async def main(binary, granted_dir):
    server = StdioServerParameters(command=binary, args=["serve"], env=dict(os.environ))
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, elicitation_callback=elicitation_callback) as session:
            await session.initialize()
            result = await session.call_tool(
                "request_grant",
                {"path": granted_dir, "access": "read", "reason": "read the export",
                 "session": "py"},
            )
            print("ASKED", len(ASKED) == 1 and granted_dir in ASKED[0])
            print("GRANTED", result.structured_content["granted"])
            code = "print(open(%r).read())" % os.path.join(granted_dir, "export.csv")
            result = await session.call_tool("execute_python", {"code": code, "session": "py"})
            print("READ", result.structured_content["stdout"].strip())


asyncio.run(main(sys.argv[1], sys.argv[2]))
