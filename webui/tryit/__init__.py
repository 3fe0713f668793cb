"""Try it: the MCP page's tool calls, made by the server as an MCP client of its own
endpoint with a server-side key of the user (`service.TryIt`); the page is
webui/web/mcp_page.py."""
