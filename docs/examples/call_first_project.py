"""Calls the first project's two tools with the MCP Python SDK: `greet`, answering its
question, and `count_words`, uploading the file first.

    python call_first_project.py SERVER_URL PROJECT_ID API_KEY FILE
"""

import asyncio
import sys
from pathlib import Path

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def answer(ctx, params: types.ElicitRequestParams) -> types.ElicitResult:
    print("asked:", params.message)
    return types.ElicitResult(action="accept", content={"formal": True})


async def main(server: str, project: str, key: str, path: str) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
        # A file param takes the id of a file uploaded to the project first.
        uploaded = await http.post(
            f"{server}/api/workflows/{project}/files",
            params={"fileName": Path(path).name, "mimeType": "text/plain"},
            content=Path(path).read_bytes(),
            headers={"Content-Type": "application/octet-stream"},
        )
        uploaded.raise_for_status()
        file_id = uploaded.json()["data"][0]["id"]

        url = f"{server}/api/workflows/{project}/mcp?target=latest"
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, elicitation_callback=answer) as client:
            greeted = await client.call_tool("greet", {"name": "Ada"})
            print(greeted.structured_content)
            counted = await client.call_tool("count_words", {"document": {"id": file_id}})
            print(counted.structured_content)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
