// An HTTP front for a stdio MCP server, so that the official conformance
// suite (which speaks Streamable HTTP) can test a stdio server.
//
//   node bridge.mjs --sdk NODE_MODULES [--port N] [--idle-ms MS] [--child-stderr FILE] -- CMD [ARG...]
//
// Listens on 127.0.0.1:N (0, the default, picks a free port) at /mcp and
// prints one line `listening http://127.0.0.1:PORT/mcp` on standard output.
// The HTTP side is the TypeScript SDK's StreamableHTTPServerTransport in
// stateful mode, one transport per session (one session per initialize);
// each session starts its own stdio child, CMD ARG... (the SDK's
// StdioClientTransport), with `{session}` in an argument replaced by the
// session's number (001, 002, ...), and its standard error appended to
// --child-stderr (`{session}` replaced too; default: the bridge's). JSON-RPC
// messages are forwarded as they are both ways; the bridge implements no
// MCP itself. A session ends when the client deletes it, when its child
// exits, when no request of it but its standing GET stream has been open
// for --idle-ms (default 5000: the conformance client neither deletes its
// sessions nor, after a failed scenario, closes their GET streams), and at
// exit (SIGINT, SIGTERM): the child's standard input is closed, and only if
// it has not exited 20 s later does it get SIGTERM (then SIGKILL).
//
// Host and Origin are checked (DNS-rebinding protection): only
// 127.0.0.1:PORT and localhost:PORT.

import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { pathToFileURL } from 'node:url';

function usage(msg) {
  process.stderr.write(`bridge: ${msg}\nusage: node bridge.mjs --sdk NODE_MODULES [--port N] [--idle-ms MS] [--child-stderr FILE] -- CMD [ARG...]\n`);
  process.exit(2);
}

const argv = process.argv.slice(2);
let sdkRoot = process.env.GLOVE_MCP_SERVERS;
let port = 0;
let idleMs = 5000;
let childStderr;
while (argv.length > 0 && argv[0] !== '--') {
  const flag = argv.shift();
  const value = argv.shift();
  if (value === undefined) usage(`${flag} needs a value`);
  if (flag === '--sdk') sdkRoot = value;
  else if (flag === '--port') port = Number(value);
  else if (flag === '--idle-ms') idleMs = Number(value);
  else if (flag === '--child-stderr') childStderr = value;
  else usage(`unknown option ${flag}`);
}
if (argv.shift() !== '--' || argv.length === 0) usage('no command');
if (!sdkRoot) usage('no --sdk (or GLOVE_MCP_SERVERS)');
if (!Number.isInteger(port) || port < 0 || port > 65535) usage('bad --port');
if (!Number.isInteger(idleMs) || idleMs < 1) usage('bad --idle-ms');
const [command, ...commandArgs] = argv;

const sdk = (p) => import(pathToFileURL(path.join(sdkRoot, '@modelcontextprotocol/sdk/dist/esm', p)).href);
const { StreamableHTTPServerTransport } = await sdk('server/streamableHttp.js');
const { StdioClientTransport } = await sdk('client/stdio.js');

const log = (msg) => process.stderr.write(`bridge: ${msg}\n`);

/** session id -> session ({ number, transport, child, open, idle, closing, ... }) */
const sessions = new Map();
let sessionCount = 0;
const allowedHosts = [];
const allowedOrigins = [];

/** Every session not yet closed, with or without an id. */
const live = new Set();

function closeSession(s, why) {
  if (s.closing) return s.closing;
  let done;
  s.closing = new Promise((resolve) => { done = resolve; });
  if (s.number > 0) log(`session ${s.number}: closing (${why})`);
  clearTimeout(s.idle);
  if (s.transport.sessionId) sessions.delete(s.transport.sessionId);
  (async () => {
    try { await s.transport.close(); } catch (e) { log(`session ${s.number}: transport close: ${e.message}`); }
    if (s.child) {
      // StdioClientTransport.close() sends SIGTERM 2 s after closing
      // stdin; `glove run` needs longer to finish on a loaded machine
      // (and a SIGTERM ends it without its summary), so stdin is closed
      // here first (the process handle is the transport's own field).
      if (!s.exited) {
        try { s.child._process?.stdin?.end(); } catch { /* closed already */ }
        await Promise.race([s.exit, new Promise((resolve) => setTimeout(resolve, 20000).unref())]);
      }
      try { await s.child.close(); } catch (e) { log(`session ${s.number}: child close: ${e.message}`); }
    }
    if (s.number > 0) log(`session ${s.number}: closed`);
    live.delete(s);
    done();
  })();
  return s.closing;
}

function armIdle(s) {
  clearTimeout(s.idle);
  if (s.open === 0 && !s.closing) {
    s.idle = setTimeout(() => closeSession(s, `no request open for ${idleMs} ms`), idleMs);
  }
}

function startChild(s) {
  const number = String(s.number).padStart(3, '0');
  const args = commandArgs.map((a) => a.replaceAll('{session}', number));
  const stderr = childStderr ? fs.openSync(childStderr.replaceAll('{session}', number), 'a', 0o600) : 'inherit';
  const child = new StdioClientTransport({
    command,
    args,
    env: { ...process.env },
    stderr,
  });
  s.exit = new Promise((resolve) => { s.exited = false; s.onexit = resolve; });
  child.onmessage = (message) => {
    s.transport.send(message).catch((e) => log(`session ${s.number}: to client: ${e.message}`));
  };
  child.onerror = (e) => log(`session ${s.number}: child: ${e.message}`);
  child.onclose = () => {
    s.exited = true;
    s.onexit();
    log(`session ${s.number}: child exited`);
    closeSession(s, 'child exited');
  };
  s.child = child;
  return child.start().then(
    () => {
      if (typeof stderr === 'number') fs.closeSync(stderr);
      log(`session ${s.number}: child ${child.pid} started: ${command} ${args.join(' ')}`);
    },
    (e) => {
      if (typeof stderr === 'number') fs.closeSync(stderr);
      s.exited = true;
      s.onexit();
      throw e;
    },
  );
}

function newSession() {
  const s = { number: 0, transport: null, child: null, open: 0, idle: null, closing: null, ready: null };
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    onsessioninitialized: (id) => {
      s.number = ++sessionCount;
      sessions.set(id, s);
      log(`session ${s.number}: ${id}`);
    },
    onsessionclosed: () => closeSession(s, 'deleted by the client'),
    enableDnsRebindingProtection: true,
    allowedHosts,
    allowedOrigins,
  });
  transport.onmessage = (message) => {
    // Messages reach the child in the order they came, once it runs.
    if (!s.ready) s.ready = startChild(s);
    s.ready = s.ready
      .then(() => s.child.send(message))
      .catch((e) => {
        log(`session ${s.number}: to child: ${e.message}`);
        closeSession(s, 'child unreachable');
      });
  };
  transport.onerror = (e) => log(`session ${s.number}: transport: ${e.message}`);
  transport.onclose = () => closeSession(s, 'transport closed');
  s.transport = transport;
  live.add(s);
  return s;
}

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url ?? '/', 'http://127.0.0.1');
  if (url.pathname !== '/mcp') {
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
    return;
  }
  const header = req.headers['mcp-session-id'];
  let s;
  if (header === undefined) {
    // The transport itself accepts only an initialize here.
    s = newSession();
  } else {
    s = typeof header === 'string' ? sessions.get(header) : undefined;
    if (!s) {
      res.writeHead(404, { 'content-type': 'application/json' }).end(
        JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null }),
      );
      return;
    }
  }
  // The standing GET stream does not keep a session from going idle.
  if (req.method !== 'GET') {
    s.open += 1;
    clearTimeout(s.idle);
    res.on('close', () => {
      s.open -= 1;
      armIdle(s);
    });
  }
  try {
    await s.transport.handleRequest(req, res);
  } catch (e) {
    log(`session ${s.number}: request: ${e.message}`);
    if (!res.headersSent) res.writeHead(500).end();
  }
  if (!s.transport.sessionId && !s.closing) {
    // Not an accepted initialize: no session was made.
    closeSession(s, 'no session');
  }
});

server.listen(port, '127.0.0.1', () => {
  const actual = server.address().port;
  allowedHosts.push(`127.0.0.1:${actual}`, `localhost:${actual}`);
  allowedOrigins.push(`http://127.0.0.1:${actual}`, `http://localhost:${actual}`);
  process.stdout.write(`listening http://127.0.0.1:${actual}/mcp\n`);
});

let exiting = false;
async function exit(signal) {
  if (exiting) return;
  exiting = true;
  log(`${signal}: closing ${sessions.size} session(s)`);
  server.close();
  server.closeAllConnections?.();
  const all = [...live].map((s) => closeSession(s, signal));
  const cap = new Promise((resolve) => setTimeout(resolve, 30000).unref());
  await Promise.race([Promise.allSettled(all), cap]);
  process.exit(0);
}
process.on('SIGINT', () => exit('SIGINT'));
process.on('SIGTERM', () => exit('SIGTERM'));
