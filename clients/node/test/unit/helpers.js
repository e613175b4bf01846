'use strict';
// Shared by the unit tests (no server): the answer table, the built
// package's modules, and RESP bytes turned into what ioredis hands over.
//
//   LF_ANSWERS    the answer table (default: the repository's scripts/answers.json)
//   LF_NODE_DIST  the build to test (default: ../../dist, the package's own)

const fs = require('node:fs');
const path = require('node:path');

const answersFile = process.env.LF_ANSWERS
  || path.resolve(__dirname, '..', '..', '..', '..', 'scripts', 'answers.json');
const dist = process.env.LF_NODE_DIST || path.resolve(__dirname, '..', '..', 'dist');

function loadAnswers() {
  return JSON.parse(fs.readFileSync(answersFile, 'utf8'));
}

/** A module of the build: 'index', 'protocol', 'outcomes', ... */
function built(name) {
  return require(path.join(dist, 'cjs', `${name}.js`));
}

/** An answer-table reply ({"integer": 1}, {"bulk": "x"}, ...) as RESP bytes. */
function resp(reply) {
  const keys = Object.keys(reply);
  if (keys.length !== 1) throw new Error(`a reply has one type: ${JSON.stringify(reply)}`);
  const [type] = keys;
  const v = reply[type];
  switch (type) {
    case 'integer': return Buffer.from(`:${v}\r\n`);
    case 'bulk': return Buffer.concat([Buffer.from(`$${Buffer.byteLength(v)}\r\n`), Buffer.from(v), Buffer.from('\r\n')]);
    case 'nil': return Buffer.from('$-1\r\n');
    case 'status': return Buffer.from(`+${v}\r\n`);
    case 'error': return Buffer.from(`-${v}\r\n`);
    case 'array': return Buffer.concat([Buffer.from(`*${v.length}\r\n`), ...v.map(resp)]);
    default: throw new Error(`no such reply type: ${type}`);
  }
}

/**
 * What ioredis hands over for these RESP bytes as the reply of an EVALSHA:
 * its parser (redis-parser, set up as ioredis' DataHandler sets it up:
 * buffers, numbers as numbers) feeds a Command of ioredis, whose promise
 * resolves with the reply (buffers made strings, as for redis.evalsha) or
 * rejects with the ReplyError. Resolves to { value } or { error }.
 */
async function throughIoredis(bytes) {
  const RedisParser = require('redis-parser');
  const { Command } = require('ioredis');
  const cmd = new Command('evalsha', ['0'.repeat(40), 0], { replyEncoding: 'utf8' });
  let fatal = null;
  const parser = new RedisParser({
    returnBuffers: true,
    stringNumbers: false,
    returnReply: (reply) => cmd.resolve(reply),
    returnError: (err) => cmd.reject(err),
    returnFatalError: (err) => { fatal = err; },
  });
  parser.execute(bytes);
  if (fatal) throw fatal;
  return cmd.promise.then((value) => ({ value }), (error) => ({ error }));
}

/** A row's fields other than its key and what it says for people. */
function fieldsOf(row, skip) {
  return Object.fromEntries(Object.entries(row).filter(([k]) => !skip.includes(k)));
}

const label = (x) => JSON.stringify(x);

module.exports = { answersFile, loadAnswers, built, resp, throughIoredis, fieldsOf, label };
