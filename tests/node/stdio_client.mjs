#!/usr/bin/env node
// Drives an MCP stdio server with the official TypeScript SDK client and prints ONE JSON
// document describing everything it observed.
//
//   node stdio_client.mjs --command steamharness --project /abs/project --data-dir /abs/data \
//     [--elicitation] [--answers '[{"action":"accept","content":{...}}]'] [--timeout-ms 30000] \
//     --ops '[{"op":"listTools"}, {"op":"callTool","name":"greet","arguments":{...},"expect":"result"}]'
//
// Every option may also come from the environment: MCP_COMMAND, MCP_PROJECT, MCP_DATA_DIR,
// MCP_ELICITATION=1, MCP_ANSWERS, MCP_OPS, MCP_TIMEOUT_MS.
//
// Operations run in order. `expect` ("result" or "error", default "result") says how a
// callTool should end; a mismatch is reported on stderr and makes the exit code 1, after the
// document is printed. Scripted answers are consumed in order, one per elicitation request;
// once they run out the client answers "cancel" (the request is still recorded).
// Output: {serverVersion, steps: [...], elicitations: [...], transportErrors}.
import { parseArgs } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

function options() {
  const { values } = parseArgs({
    options: {
      command: { type: 'string', default: process.env.MCP_COMMAND ?? 'steamharness' },
      project: { type: 'string', default: process.env.MCP_PROJECT },
      'data-dir': { type: 'string', default: process.env.MCP_DATA_DIR },
      elicitation: { type: 'boolean', default: process.env.MCP_ELICITATION === '1' },
      answers: { type: 'string', default: process.env.MCP_ANSWERS ?? '[]' },
      ops: { type: 'string', default: process.env.MCP_OPS ?? '[{"op":"listTools"}]' },
      'timeout-ms': { type: 'string', default: process.env.MCP_TIMEOUT_MS ?? '30000' },
    },
  });
  if (!values.project || !values['data-dir']) {
    throw new Error('--project and --data-dir (or MCP_PROJECT, MCP_DATA_DIR) are required');
  }
  return {
    command: values.command,
    args: ['mcp', values.project, '--data-dir', values['data-dir']],
    elicitation: values.elicitation,
    answers: JSON.parse(values.answers),
    ops: JSON.parse(values.ops),
    timeout: Number(values['timeout-ms']),
  };
}

function describeError(err) {
  return { code: err?.code ?? null, message: String(err?.message ?? err) };
}

async function main() {
  const opts = options();
  const capabilities = opts.elicitation ? { elicitation: { form: {} } } : {};
  const client = new Client({ name: 'steamharness-ts-test-client', version: '1.0.0' }, { capabilities });
  const observed = { serverVersion: null, steps: [], elicitations: [], transportErrors: [] };
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

  const transport = new StdioClientTransport({ command: opts.command, args: opts.args });
  try {
    await client.connect(transport);
    // Lines the client could not parse (e.g. stdout noise) surface here, after connecting.
    client.onerror = (err) => observed.transportErrors.push(String(err?.message ?? err));
    const info = client.getServerVersion();
    observed.serverVersion = { name: info?.name, version: info?.version };

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
  } finally {
    await client.close();
  }
  process.stdout.write(JSON.stringify(observed) + '\n');
  if (mismatches.length) {
    process.stderr.write(`stdio_client: unexpected outcomes: ${mismatches.join('; ')}\n`);
    process.exitCode = 1;
  }
}

main().catch((err) => {
  process.stderr.write(`stdio_client: ${err?.stack ?? err}\n`);
  process.exitCode = 1;
});
