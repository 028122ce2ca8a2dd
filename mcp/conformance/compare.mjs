// Compares two runs of the conformance suite's server scenarios:
//
//   node compare.mjs --direct DIR --glove DIR --expected FILE
//
// Each DIR is a results directory of `conformance server -o DIR`: one
// `server-<scenario>-<timestamp>/checks.json` per scenario. A scenario
// passes when its checks.json holds at least one check and none is a
// FAILURE or a WARNING (the suite's own baseline rule). Prints the table
// (scenario, direct, through Glove) and exits 1 when
//   - a scenario that passes directly does not pass through Glove and is
//     not listed in FILE,
//   - a scenario listed in FILE no longer differs so (a stale entry),
//   - the direct run did not pass server-initialize (the bridge or the
//     suite is broken, and the comparison would prove nothing),
// else 0. FILE: one scenario a line, then its reason; `#` comments.

import fs from 'node:fs';
import path from 'node:path';

const args = {};
for (let i = 2; i + 1 < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
for (const k of ['direct', 'glove', 'expected']) {
  if (!args[k]) {
    process.stderr.write('usage: node compare.mjs --direct DIR --glove DIR --expected FILE\n');
    process.exit(2);
  }
}

const STAMP = /^server-(.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z$/;

/** scenario -> { pass, why } */
function load(dir) {
  const out = new Map();
  const entries = fs.existsSync(dir) ? fs.readdirSync(dir).sort() : [];
  for (const e of entries) {
    const m = STAMP.exec(e);
    if (!m) continue;
    let checks;
    try {
      checks = JSON.parse(fs.readFileSync(path.join(dir, e, 'checks.json'), 'utf8'));
    } catch (err) {
      out.set(m[1], { pass: false, why: `no readable checks.json: ${err.message}` });
      continue;
    }
    if (!Array.isArray(checks) || checks.length === 0) {
      out.set(m[1], { pass: false, why: 'no checks' });
      continue;
    }
    const bad = checks.filter((c) => c.status === 'FAILURE' || c.status === 'WARNING');
    out.set(m[1], {
      pass: bad.length === 0,
      why: bad.map((c) => `${c.status} ${c.id}: ${c.errorMessage ?? c.description ?? ''}`).join('; '),
    });
  }
  return out;
}

const expected = new Map();
const lines = fs.readFileSync(args.expected, 'utf8').split('\n');
for (const [i, raw] of lines.entries()) {
  const line = raw.trim();
  if (line === '' || line.startsWith('#')) continue;
  const m = /^(\S+)\s+(\S.*)$/.exec(line);
  if (!m) {
    process.stderr.write(`${args.expected}:${i + 1}: a scenario and its reason, please\n`);
    process.exit(2);
  }
  expected.set(m[1], m[2]);
}

const direct = load(args.direct);
const glove = load(args.glove);
const names = [...new Set([...direct.keys(), ...glove.keys()])];
const problems = [];
const rows = [];
const state = (r) => (r === undefined ? 'missing' : r.pass ? 'pass' : 'fail');
for (const name of names) {
  const d = direct.get(name);
  const g = glove.get(name);
  const differs = d?.pass === true && g?.pass !== true;
  let note = '';
  if (differs && expected.has(name)) note = 'expected difference';
  else if (differs) {
    note = 'REGRESSION';
    problems.push(`${name}: passes directly, ${state(g)} through Glove, and is not in ${path.basename(args.expected)}: ${g?.why ?? 'no result'}`);
  } else if (expected.has(name)) {
    note = 'STALE';
    problems.push(`${name}: listed in ${path.basename(args.expected)} but direct ${state(d)}, through Glove ${state(g)}`);
  } else if (d?.pass !== true && g?.pass === true) note = 'passes only through Glove';
  rows.push([name, state(d), state(g), note]);
}
for (const name of expected.keys()) {
  if (!names.includes(name)) {
    problems.push(`${name}: listed in ${path.basename(args.expected)} but not run`);
    rows.push([name, 'missing', 'missing', 'STALE']);
  }
}
if (direct.get('server-initialize')?.pass !== true) {
  problems.push('server-initialize does not pass directly: the bridge or the suite is broken');
}

const head = ['scenario', 'direct', 'through glove', ''];
const width = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
const fmt = (r) => r.map((c, i) => c.padEnd(width[i])).join('  ').trimEnd();
console.log(fmt(head));
console.log(fmt(width.map((w) => '-'.repeat(w))));
for (const r of rows) console.log(fmt(r));
const count = (m) => [...m.values()].filter((r) => r.pass).length;
console.log(`\n${names.length} scenarios: ${count(direct)} pass directly, ${count(glove)} through Glove, ${expected.size} expected differences`);
for (const [name, reason] of expected) console.log(`  ${name}: ${reason}`);
if (problems.length > 0) {
  console.log('\nconformance comparison FAILED:');
  for (const p of problems) console.log(`  ${p}`);
  process.exit(1);
}
