'use strict';
// The client-side mode's decoder (src/protocol.ts) against the answer table,
// scripts/answers.json, row by row, with no server: each reply is written as
// RESP bytes, parsed by ioredis' own parser into what ioredis hands over,
// and decoded; the outcome and every field the row names must match.

const { test } = require('node:test');
const assert = require('node:assert/strict');
const { answersFile, loadAnswers, built, resp, throughIoredis, fieldsOf, label } = require('./helpers');

const table = loadAnswers();
const protocol = built('protocol');

// an answer as the table writes it: generations as decimal strings, pttl_ms
function tableForm(answer) {
  const out = {};
  for (const [k, v] of Object.entries(answer)) {
    if (k === 'outcome' || k === 'reason') continue;
    if (k === 'generation' || k === 'stored') out[k] = v.toString();
    else if (k === 'pttlMs') out.pttl_ms = v;
    else out[k] = v;
  }
  return out;
}

test(`the answer table is there and has rows (${answersFile})`, () => {
  assert.ok(Array.isArray(table.replies) && table.replies.length > 0, 'replies');
  assert.ok(Array.isArray(table.errors) && table.errors.length > 0, 'errors');
  assert.ok(Array.isArray(table.transport) && table.transport.length > 0, 'transport');
  const outcomes = Object.keys(table.outcomes);
  for (const row of [...table.replies, ...table.errors, ...table.transport]) {
    assert.ok(outcomes.includes(row.outcome), `${row.outcome} is listed under outcomes`);
  }
});

for (const row of table.replies) {
  test(`reply: ${row.script} ${label(row.reply)} → ${row.outcome}`, async () => {
    const got = await throughIoredis(resp(row.reply));
    assert.ok(!('error' in got), `ioredis rejected it: ${got.error}`);
    const answer = protocol.decode(row.script, got.value);
    assert.equal(answer.outcome, row.outcome, `decoded ${label(got.value)}: ${label(tableForm(answer))}`);
    const want = fieldsOf(row, ['script', 'reply', 'outcome', 'why']);
    const have = tableForm(answer);
    for (const [k, v] of Object.entries(want)) {
      assert.ok(k in have, `the answer has ${k}`);
      assert.deepEqual(have[k], v, k);
    }
    // generations stay exact: a bigint, never a number
    for (const k of ['generation', 'stored']) {
      if (k in answer) assert.equal(typeof answer[k], 'bigint', k);
    }
    if (answer.outcome === 'unknown') assert.equal(typeof answer.reason, 'string');
  });
}

for (const row of table.errors) {
  test(`error reply: ${label(row.reply)} → ${row.outcome}, for every script`, async () => {
    const got = await throughIoredis(resp(row.reply));
    assert.ok('error' in got, `ioredis resolved it: ${label(got.value)}`);
    assert.equal(got.error.name, 'ReplyError');
    const answer = protocol.decodeRejection(got.error);
    assert.equal(answer.outcome, row.outcome);
    assert.equal(protocol.decodeError(row.reply.error).outcome, row.outcome);
    assert.equal(answer.reason, `Redis answered: ${row.reply.error}`);
  });
}

// how this library meets each transport row: the request kinds, and the
// errors of ioredis that are each kind
const ioredisErrors = {
  not_sent: [new Error("Stream isn't writeable and enableOfflineQueue options is false")],
  no_reply: [new Error('Connection is closed.'), new Error('Command timed out'),
    Object.assign(new Error('Reached the max retries per request limit (which is 20).'),
      { name: 'MaxRetriesPerRequestError' })],
  interrupted: [],
};
for (const row of table.transport) {
  test(`transport: ${row.request} → ${row.outcome}`, () => {
    assert.ok(row.request in ioredisErrors, `a request kind this library knows: ${row.request}`);
    assert.equal(protocol.decodeTransport(row.request, 'why').outcome, row.outcome);
    for (const err of ioredisErrors[row.request]) {
      assert.equal(protocol.transportFailureOf(err), row.request, err.message);
      assert.equal(protocol.decodeRejection(err).outcome, row.outcome, err.message);
    }
  });
}
