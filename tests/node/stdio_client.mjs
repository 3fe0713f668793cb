#!/usr/bin/env node
// Drives an MCP stdio server with the official TypeScript SDK client and prints ONE JSON
// document describing everything it observed.
//
//   node stdio_client.mjs --command steamharness [--command-prefix '["arg", ...]'] \
//     --project /abs/project --data-dir /abs/data \
//     [--elicitation] [--answers '[{"action":"accept","content":{...}}]'] [--timeout-ms 30000] \
//     [--server-env '{"STEAMHARNESS_PROGRESS_INTERVAL_SECONDS":"1"}'] \
//     --ops '[{"op":"listTools"}, {"op":"callTool","name":"greet","arguments":{...},"expect":"result"}]'
//
// --command-prefix: arguments the command gets before `mcp PROJECT --data-dir DATA` (the
// tests' fork-server launcher, tests/processes.py).
// Every option may also come from the environment: MCP_COMMAND, MCP_COMMAND_PREFIX, MCP_PROJECT, MCP_DATA_DIR,
// MCP_SERVER_ENV, MCP_ELICITATION=1, MCP_ANSWERS, MCP_OPS, MCP_TIMEOUT_MS.
// The server gets the SDK's default environment plus --server-env (the transport merges them).
//
// Operations, `expect` and scripted answers work as common.mjs describes.
// Output: {serverVersion, steps: [...], elicitations: [...], transportErrors}.
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { makeClient, observeConnected, parseOptions, report, runMain, runOps } from './common.mjs';

function options() {
  const { values, common } = parseOptions({
    command: { type: 'string', default: process.env.MCP_COMMAND ?? 'steamharness' },
    'command-prefix': { type: 'string', default: process.env.MCP_COMMAND_PREFIX ?? '[]' },
    project: { type: 'string', default: process.env.MCP_PROJECT },
    'data-dir': { type: 'string', default: process.env.MCP_DATA_DIR },
    'server-env': { type: 'string', default: process.env.MCP_SERVER_ENV ?? '{}' },
  });
  if (!values.project || !values['data-dir']) {
    throw new Error('--project and --data-dir (or MCP_PROJECT, MCP_DATA_DIR) are required');
  }
  return {
    command: values.command,
    args: [...JSON.parse(values['command-prefix']), 'mcp', values.project, '--data-dir', values['data-dir']],
    env: JSON.parse(values['server-env']),
    ...common,
  };
}

async function main() {
  const opts = options();
  const observed = { serverVersion: null, steps: [], elicitations: [], transportErrors: [] };
  const mismatches = [];
  const client = makeClient('steamharness-ts-test-client', opts, observed);

  const transport = new StdioClientTransport({ command: opts.command, args: opts.args, env: opts.env });
  try {
    await client.connect(transport);
    // Lines the client could not parse (e.g. stdout noise) surface after connecting.
    observeConnected(client, observed);
    await runOps(client, opts, observed, mismatches);
  } finally {
    await client.close();
  }
  report('stdio_client', observed, mismatches);
}

runMain('stdio_client', main);
