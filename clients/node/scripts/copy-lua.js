'use strict';
// Copies the repository's Lua scripts (../../scripts/*.lua, the one copy the
// C library embeds too) into dist/lua/, byte for byte: the client-side mode
// (RedisLeases) sends them, named by the SHA1 of those bytes. Fails loudly
// when a script the client needs is missing: a package without them would
// only fail when a lease is taken.
const fs = require('node:fs');
const path = require('node:path');
const crypto = require('node:crypto');

const root = path.join(__dirname, '..');
const src = path.resolve(root, '..', '..', 'scripts');
const out = path.join(root, 'dist', 'lua');
const needed = ['acquire.lua', 'renew.lua', 'release.lua', 'check.lua'];

let files;
try {
  files = fs.readdirSync(src).filter((f) => f.endsWith('.lua')).sort();
} catch (err) {
  console.error(`copy-lua: cannot read ${src} (the lease_fence repository's scripts/): ${err.message}`);
  process.exit(1);
}
const missing = needed.filter((f) => !files.includes(f));
if (missing.length > 0) {
  console.error(`copy-lua: missing in ${src}: ${missing.join(', ')}`);
  process.exit(1);
}
fs.rmSync(out, { recursive: true, force: true });
fs.mkdirSync(out, { recursive: true });
for (const f of files) {
  const body = fs.readFileSync(path.join(src, f));
  fs.writeFileSync(path.join(out, f), body);
  const sha1 = crypto.createHash('sha1').update(body).digest('hex');
  console.log(`dist/lua/${f}: ${sha1}`);
}
