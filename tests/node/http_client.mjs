#!/usr/bin/env node
// Drives a Streamable HTTP MCP endpoint with the official TypeScript SDK client and prints ONE
// JSON document describing everything it observed.
//
//   node http_client.mjs --url 'http://127.0.0.1:8000/api/workflows/<id>/mcp?target=latest' \
//     --key shk_... [--elicitation] [--answers '[{"action":"accept","content":{...}}]'] \
//     [--timeout-ms 30000] \
//     --ops '[{"op":"listTools"}, {"op":"callTool","name":"greet","arguments":{...},"expect":"result"}]'
//
// Every option may also come from the environment: MCP_URL, MCP_KEY, MCP_ELICITATION=1,
// MCP_ANSWERS, MCP_OPS, MCP_TIMEOUT_MS. Prefer MCP_KEY to --key: argv is visible to `ps`.
// The key is sent as `Authorization: Bearer <key>` on every request (requestInit.headers).
//
// Operations, `expect` and scripted answers work as common.mjs describes.
// A failed connect (e.g. HTTP 403) is not a crash: it is recorded as `connectError` with the
// transport's code (the HTTP status) and no operation runs. At the end the session is
// terminated (HTTP DELETE) and the client closed.
// Output: {connectError, serverVersion, sessionId, steps: [...], elicitations: [...],
//          transportErrors, sessionTerminated}.
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { describeError, makeClient, observeConnected, parseOptions, report, runMain, runOps } from './common.mjs';

function options() {
  const { values, common } = parseOptions({
    url: { type: 'string', default: process.env.MCP_URL },
    key: { type: 'string', default: process.env.MCP_KEY },
  });
  if (!values.url || !values.key) {
    throw new Error('--url and --key (or MCP_URL, MCP_KEY) are required');
  }
  return { url: new URL(values.url), key: values.key, ...common };
}

async function main() {
  const opts = options();
  const observed = {
    connectError: null,
    serverVersion: null,
    sessionId: null,
    steps: [],
    elicitations: [],
    transportErrors: [],
    sessionTerminated: null,
  };
  const mismatches = [];
  const client = makeClient('steamharness-ts-http-test-client', opts, observed);

  const transport = new StreamableHTTPClientTransport(opts.url, {
    requestInit: { headers: { Authorization: `Bearer ${opts.key}` } },
  });
  let connected = false;
  try {
    try {
      await client.connect(transport);
      connected = true;
    } catch (err) {
      observed.connectError = describeError(err);
    }
    if (connected) {
      // Errors outside a request (e.g. the optional GET stream) surface after connecting.
      observeConnected(client, observed);
      observed.sessionId = transport.sessionId ?? null;
      await runOps(client, opts, observed, mismatches);
    }
  } finally {
    if (connected && transport.sessionId) {
      try {
        await transport.terminateSession();
        observed.sessionTerminated = true;
      } catch (err) {
        observed.sessionTerminated = false;
        observed.transportErrors.push(`terminateSession: ${describeError(err).message}`);
      }
    }
    await client.close();
  }
  report('http_client', observed, mismatches);
}

runMain('http_client', main);
