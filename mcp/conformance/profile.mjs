// Writes the MCP profile (docs/mcp.md) that the conformance lane runs
// server-everything under:
//
//   node profile.mjs --sdk NODE_MODULES --out FILE -- CMD [ARG...]
//
// It asks the server itself (over stdio, as the mediator will: no client
// capabilities declared) for its tools, resources and prompts, and allows
// every one of them, plus the resource URIs and prompt names the suite's
// scenarios ask for, so that a request for one of those reaches the
// server through Glove as it does directly (server-everything has none of
// them; its answer is what the scenario judges). FILE is created new with
// mode 0600 (`glove run` reads the profile as a protected file).

import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

// What the suite's server scenarios (conformance 0.1.13) read and get.
const SUITE_RESOURCES = [
  'test://static-text',
  'test://static-binary',
  'test://template/123/data',
  'test://watched-resource',
  'test://embedded-resource',
  'test://example-resource',
  'test://mixed-content-resource',
];
const SUITE_PROMPTS = [
  'test_simple_prompt',
  'test_prompt_with_arguments',
  'test_prompt_with_embedded_resource',
  'test_prompt_with_image',
];

const argv = process.argv.slice(2);
let sdkRoot = process.env.GLOVE_MCP_SERVERS;
let out;
while (argv.length > 0 && argv[0] !== '--') {
  const flag = argv.shift();
  const value = argv.shift();
  if (flag === '--sdk') sdkRoot = value;
  else if (flag === '--out') out = value;
  else throw new Error(`unknown option ${flag}`);
}
argv.shift();
const [command, ...args] = argv;
if (!sdkRoot || !out || !command) {
  process.stderr.write('usage: node profile.mjs --sdk NODE_MODULES --out FILE -- CMD [ARG...]\n');
  process.exit(2);
}

const sdk = (p) => import(pathToFileURL(path.join(sdkRoot, '@modelcontextprotocol/sdk/dist/esm', p)).href);
const { Client } = await sdk('client/index.js');
const { StdioClientTransport } = await sdk('client/stdio.js');

const client = new Client({ name: 'glove-conformance-profile', version: '0' }, { capabilities: {} });
const timer = setTimeout(() => {
  process.stderr.write('profile: the server did not answer in 30 s\n');
  process.exit(1);
}, 30000);
await client.connect(new StdioClientTransport({ command, args, env: { PATH: '/usr/bin:/bin' }, stderr: 'ignore' }));

async function all(method, key) {
  const items = [];
  let cursor;
  for (let page = 0; page < 64; page++) {
    const r = await client[method](cursor ? { cursor } : {});
    items.push(...r[key]);
    cursor = r.nextCursor;
    if (!cursor) break;
  }
  return items;
}
const tools = (await all('listTools', 'tools')).map((t) => t.name);
const resources = (await all('listResources', 'resources')).map((r) => r.uri);
const prompts = (await all('listPrompts', 'prompts')).map((p) => p.name);
await client.close();
clearTimeout(timer);

const uniq = (xs) => [...new Set(xs)];
const profile = {
  schema_version: 1,
  servers: [
    {
      server_id: 'everything',
      command: { path: command, arguments: args, environment: ['PATH=/usr/bin:/bin'], working_directory: '/' },
      tools: tools.map((name) => ({ name })),
      resources: uniq([...resources, ...SUITE_RESOURCES]),
      prompts: uniq([...prompts, ...SUITE_PROMPTS]),
    },
  ],
};
fs.writeFileSync(out, JSON.stringify(profile, null, 2) + '\n', { mode: 0o600, flag: 'wx' });
process.stdout.write(
  `profile: ${tools.length} tools (${tools.join(', ')}), ${resources.length}+${SUITE_RESOURCES.length} resources, ${prompts.length}+${SUITE_PROMPTS.length} prompts\n`,
);
