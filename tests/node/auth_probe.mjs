#!/usr/bin/env node
// Connects the official TypeScript SDK client to a Streamable HTTP MCP endpoint that refuses it,
// and prints ONE JSON document saying what the client reported and which requests it made.
//
//   MCP_KEY=shk_... node auth_probe.mjs --url 'http://127.0.0.1:8000/api/workflows/<id>/mcp' [--oauth]
//
// MCP_KEY (optional: none sends no Authorization header) is sent as `Authorization: Bearer <key>`.
// --oauth gives the transport an OAuth client provider (in memory, as an editor's would be): on
// a 401 the SDK then runs its OAuth discovery and registration against the server; the provider
// never opens a browser (reaching that step is recorded as `redirectedToAuthorization`).
// Output: {error: {name, code, message} | null, connected, requests: [{method, path, status}],
//          redirectedToAuthorization}.
import { parseArgs } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

function options() {
  const { values } = parseArgs({
    options: {
      url: { type: 'string' },
      oauth: { type: 'boolean', default: false },
    },
  });
  if (!values.url) throw new Error('--url is required');
  return { url: new URL(values.url), key: process.env.MCP_KEY || null, oauth: values.oauth };
}

function memoryProvider(observed) {
  let client;
  let tokens;
  let verifier;
  return {
    get redirectUrl() {
      return 'http://127.0.0.1:1/callback';
    },
    get clientMetadata() {
      return {
        client_name: 'steamharness-auth-probe',
        redirect_uris: ['http://127.0.0.1:1/callback'],
        grant_types: ['authorization_code'],
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
      };
    },
    clientInformation: () => client,
    saveClientInformation: (info) => {
      client = info;
    },
    tokens: () => tokens,
    saveTokens: (t) => {
      tokens = t;
    },
    redirectToAuthorization: () => {
      observed.redirectedToAuthorization = true;
    },
    saveCodeVerifier: (v) => {
      verifier = v;
    },
    codeVerifier: () => verifier,
  };
}

async function main() {
  const opts = options();
  const observed = { error: null, connected: false, requests: [], redirectedToAuthorization: false };
  const recording = async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const method = init?.method ?? (input instanceof Request ? input.method : 'GET');
    const response = await fetch(input, init);
    observed.requests.push({ method, path: url.pathname, status: response.status });
    return response;
  };
  const headers = opts.key ? { Authorization: `Bearer ${opts.key}` } : {};
  const transport = new StreamableHTTPClientTransport(opts.url, {
    requestInit: { headers },
    fetch: recording,
    ...(opts.oauth ? { authProvider: memoryProvider(observed) } : {}),
  });
  const client = new Client({ name: 'steamharness-auth-probe', version: '1.0.0' });
  try {
    await client.connect(transport);
    observed.connected = true;
  } catch (err) {
    observed.error = { name: err?.name ?? null, code: err?.code ?? null, message: String(err?.message ?? err) };
  } finally {
    await client.close();
  }
  process.stdout.write(JSON.stringify(observed) + '\n');
}

main().catch((err) => {
  process.stderr.write(`auth_probe: ${err?.stack ?? err}\n`);
  process.exitCode = 1;
});
