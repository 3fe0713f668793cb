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
// Operations run in order. `expect` ("result" or "error", default "result") says how a
// callTool should end; a mismatch is reported on stderr and makes the exit code 1, after the
// document is printed. Scripted answers are consumed in order, one per elicitation request;
// once they run out the client answers "cancel" (the request is still recorded).
// A failed connect (e.g. HTTP 403) is not a crash: it is recorded as `connectError` with the
// transport's code (the HTTP status) and no operation runs. At the end the session is
// terminated (HTTP DELETE) and the client closed.
// Output: {connectError, serverVersion, sessionId, steps: [...], elicitations: [...],
//          transportErrors, sessionTerminated}.
import { parseArgs } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

function options() {
  const { values } = parseArgs({
    options: {
      url: { type: 'string', default: process.env.MCP_URL },
      key: { type: 'string', default: process.env.MCP_KEY },
      elicitation: { type: 'boolean', default: process.env.MCP_ELICITATION === '1' },
      answers: { type: 'string', default: process.env.MCP_ANSWERS ?? '[]' },
      ops: { type: 'string', default: process.env.MCP_OPS ?? '[{"op":"listTools"}]' },
      'timeout-ms': { type: 'string', default: process.env.MCP_TIMEOUT_MS ?? '30000' },
    },
  });
  if (!values.url || !values.key) {
    throw new Error('--url and --key (or MCP_URL, MCP_KEY) are required');
  }
  return {
    url: new URL(values.url),
    key: values.key,
    elicitation: values.elicitation,
    answers: JSON.parse(values.answers),
    ops: JSON.parse(values.ops),
    timeout: Number(values['timeout-ms']),
  };
}

function describeError(err) {
  return { code: err?.code ?? null, message: String(err?.message ?? err) };
}

async function runOps(client, opts, observed, mismatches) {
  for (const op of opts.ops) {
    const request = { timeout: opts.timeout };
    if (op.op === 'listTools') {
      const { tools } = await client.listTools(undefined, request);
      observed.steps.push({
        op: 'listTools',
        tools: tools.map(({ name, title, description, inputSchema }) => ({ name, title, description, inputSchema })),
      });
    } else if (op.op === 'callTool') {
      const step = { op: 'callTool', name: op.name, arguments: op.arguments ?? {} };
      try {
        const { content, structuredContent, isError } = await client.callTool(
          { name: op.name, arguments: step.arguments }, undefined, request);
        step.result = { content, structuredContent, isError: isError ?? false };
      } catch (err) {
        step.error = describeError(err);
      }
      const got = 'error' in step ? 'error' : 'result';
      if (got !== (op.expect ?? 'result')) mismatches.push(`${op.name}: expected ${op.expect ?? 'result'}, got ${got}`);
      observed.steps.push(step);
    } else {
      throw new Error(`unknown op ${JSON.stringify(op)}`);
    }
  }
}

async function main() {
  const opts = options();
  const capabilities = opts.elicitation ? { elicitation: { form: {} } } : {};
  const client = new Client({ name: 'steamharness-ts-http-test-client', version: '1.0.0' }, { capabilities });
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

  if (opts.elicitation) {
    const answers = [...opts.answers];
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      const answer = answers.shift() ?? null;
      const { message, requestedSchema } = request.params;
      observed.elicitations.push({ message, requestedSchema, answer });
      return answer ?? { action: 'cancel' };
    });
  }

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
      // Errors outside a request (e.g. the optional GET stream) surface here, after connecting.
      client.onerror = (err) => observed.transportErrors.push(String(err?.message ?? err));
      const info = client.getServerVersion();
      observed.serverVersion = { name: info?.name, version: info?.version };
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
  process.stdout.write(JSON.stringify(observed) + '\n');
  if (mismatches.length) {
    process.stderr.write(`http_client: unexpected outcomes: ${mismatches.join('; ')}\n`);
    process.exitCode = 1;
  }
}

main().catch((err) => {
  process.stderr.write(`http_client: ${err?.stack ?? err}\n`);
  process.exitCode = 1;
});
