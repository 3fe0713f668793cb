"""The HTTP edge: what every request passes before a route sees it, and how every refusal
is said.

- `guard` (`RequestGuard`): Host and Origin, one Authorization header, body caps and pace,
  the MCP endpoint's failed keys counted for the throttle; no authentication (the routes'
  dependencies decide it: `webui.web.policies`);
- `connections`: uvicorn's protocol with the bounds it lacks (request heads, bodies nobody
  reads, `/healthz`'s reserve of connections);
- `headers` (`SecurityHeaders`): the security headers on every response;
- `errors` (`ErrorRenderer`): the one renderer of an error (its document for the JSON API,
  the MCP endpoint or a page, its status and headers), used by the app's exception
  handlers, the guard and the MCP endpoint's replies;
- `refusals` (`RefusalAudit`): security refusals audited without a flood of rows;
- `access_log`: credentials kept out of the server's own log lines.

Below the transports (`webui.mcp`, `webui.web`), above the services: the edge imports
neither; what it needs of them (the HTML error page, the request's origin) is handed in.
"""
