// What the TypeScript SDK test clients (http_client.mjs, stdio_client.mjs) share: the options
// every client takes, the SDK Client with its scripted elicitation answers, the scripted
// operations, and printing the ONE JSON document a client run ends with.
//
// Common options (each may also come from the environment): --elicitation (MCP_ELICITATION=1),
// --answers (MCP_ANSWERS), --ops (MCP_OPS), --timeout-ms (MCP_TIMEOUT_MS).
//
// Operations run in order. `expect` ("result" or "error", default "result") says how a
// callTool should end; a mismatch is reported on stderr and makes the exit code 1, after the
// document is printed. A callTool may also set `timeoutMs` (its own request time-out),
// `progress: true` (send a progress token and record each notification in the step's
// `progress`) and `resetTimeoutOnProgress: true` (the SDK option of that name). Scripted
// answers are consumed in order, one per elicitation request; once they run out the client
// answers "cancel" (the request is still recorded). The answer `{"hold": true}` never
// answers: the person answers elsewhere and the server cancels the request.
import { parseArgs } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

/** Parses argv with the common options plus `own` (parseArgs option specs); returns
 * `{values, common}` where `common` holds the parsed elicitation, answers, ops and timeout. */
export function parseOptions(own) {
  const { values } = parseArgs({
    options: {
      ...own,
      elicitation: { type: 'boolean', default: process.env.MCP_ELICITATION === '1' },
      answers: { type: 'string', default: process.env.MCP_ANSWERS ?? '[]' },
      ops: { type: 'string', default: process.env.MCP_OPS ?? '[{"op":"listTools"}]' },
      'timeout-ms': { type: 'string', default: process.env.MCP_TIMEOUT_MS ?? '30000' },
    },
  });
  const common = {
    elicitation: values.elicitation,
    answers: JSON.parse(values.answers),
    ops: JSON.parse(values.ops),
    timeout: Number(values['timeout-ms']),
  };
  return { values, common };
}

export function describeError(err) {
  return { code: err?.code ?? null, message: String(err?.message ?? err) };
}

/** An SDK Client named `name`; with opts.elicitation it declares form elicitation and answers
 * each request with the next scripted answer (then "cancel"), recording it in observed.elicitations. */
export function makeClient(name, opts, observed) {
  const capabilities = opts.elicitation ? { elicitation: { form: {} } } : {};
  const client = new Client({ name, version: '1.0.0' }, { capabilities });
  if (opts.elicitation) {
    const answers = [...opts.answers];
    client.setRequestHandler(ElicitRequestSchema, async (request, extra) => {
      const answer = answers.shift() ?? null;
      const { message, requestedSchema } = request.params;
      const seen = { message, requestedSchema, answer };
      observed.elicitations.push(seen);
      if (answer?.hold) {
        // Until the server cancels the request; the SDK sends nothing back for a cancelled one.
        await new Promise((resolve) => extra.signal.addEventListener('abort', resolve, { once: true }));
        seen.cancelledByServer = true;
        return { action: 'cancel' };
      }
      return answer ?? { action: 'cancel' };
    });
  }
  return client;
}

/** After connecting: errors outside a request go to observed.transportErrors, and the
 * server's name and version to observed.serverVersion. */
export function observeConnected(client, observed) {
  client.onerror = (err) => observed.transportErrors.push(String(err?.message ?? err));
  const info = client.getServerVersion();
  observed.serverVersion = { name: info?.name, version: info?.version };
}

/** Runs opts.ops in order, appending one step each to observed.steps; an outcome other than
 * the op's `expect` is added to `mismatches`. */
export async function runOps(client, opts, observed, mismatches) {
  for (const op of opts.ops) {
    const request = { timeout: op.timeoutMs ?? opts.timeout };
    if (op.op === 'listTools') {
      const { tools } = await client.listTools(undefined, request);
      observed.steps.push({
        op: 'listTools',
        tools: tools.map(({ name, title, description, inputSchema }) => ({ name, title, description, inputSchema })),
      });
    } else if (op.op === 'callTool') {
      const step = { op: 'callTool', name: op.name, arguments: op.arguments ?? {} };
      if (op.progress) {
        step.progress = [];
        request.onprogress = (p) => step.progress.push(p);
        request.resetTimeoutOnProgress = op.resetTimeoutOnProgress ?? false;
      }
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

/** Prints the document; any mismatch goes to stderr as `<label>: ...` and sets exit code 1. */
export function report(label, observed, mismatches) {
  process.stdout.write(JSON.stringify(observed) + '\n');
  if (mismatches.length) {
    process.stderr.write(`${label}: unexpected outcomes: ${mismatches.join('; ')}\n`);
    process.exitCode = 1;
  }
}

/** Runs `main`; a crash goes to stderr as `<label>: <stack>` with exit code 1. */
export function runMain(label, main) {
  main().catch((err) => {
    process.stderr.write(`${label}: ${err?.stack ?? err}\n`);
    process.exitCode = 1;
  });
}
