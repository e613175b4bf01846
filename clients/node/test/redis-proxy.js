'use strict';
// A small proxy between a Redis client and the real Redis of the test run
// (a unix socket in, the server's unix socket out), that loses the reply of
// one request on purpose — what a network or a restarted connection does —
// so that the tests can show what a client makes of a request Redis ran but
// whose answer never came:
//
//   const proxy = await startProxy(process.env.LF_REDIS_SOCK);
//   const fired = proxy.arm('drop', marker);   // the next request naming marker
//   new Redis({ path: proxy.path, ... })
//
// Modes, for the first request (a RESP array) one of whose arguments equals
// `marker` (e.g. the lease key), once:
//   'drop'   the request goes to Redis; its reply is thrown away and the
//            client's connection closed once it came (so it certainly ran).
//            The client may connect again: a new connection, passed through.
//   'twice'  the request runs on a connection of its own first, its reply
//            thrown away, then it goes to Redis as sent: it runs twice and
//            the client hears the second answer — a request sent again
//            after its reply was lost.
// `fired` resolves when that is done, with the reply thrown away (its first
// bytes). Every other request and reply passes through unchanged, in order.

const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

/** One complete RESP request at the start of buf: { raw, args } or null (incomplete). */
function takeRequest(buf) {
  if (buf.length === 0) return null;
  if (buf[0] !== 0x2a) {                       // an inline command: a line
    const end = buf.indexOf('\r\n');
    return end < 0 ? null : { raw: buf.subarray(0, end + 2), args: [] };
  }
  let end = buf.indexOf('\r\n');
  if (end < 0) return null;
  const n = Number(buf.subarray(1, end).toString());
  let at = end + 2;
  const args = [];
  for (let i = 0; i < n; i += 1) {
    if (at >= buf.length) return null;
    if (buf[at] !== 0x24) throw new Error(`redis-proxy: not a bulk string at ${at}`);
    end = buf.indexOf('\r\n', at);
    if (end < 0) return null;
    const len = Number(buf.subarray(at + 1, end).toString());
    const start = end + 2;
    if (buf.length < start + len + 2) return null;
    args.push(buf.subarray(start, start + len));
    at = start + len + 2;
  }
  return { raw: buf.subarray(0, at), args };
}

/**
 * The length of one complete reply at buf[at...], or -1 (incomplete): RESP2
 * and RESP3 (a client may say HELLO 3).
 */
function replyLength(buf, at = 0) {
  if (at >= buf.length) return -1;
  const end = buf.indexOf('\r\n', at);
  if (end < 0) return -1;
  const type = String.fromCharCode(buf[at]);
  const line = end + 2 - at;
  if ('+-:_,#('.includes(type)) return line;             // one line
  const n = Number(buf.subarray(at + 1, end).toString());
  if ('$=!'.includes(type)) {                              // a length, then bytes
    if (n < 0) return line;
    return buf.length < end + 2 + n + 2 ? -1 : line + n + 2;
  }
  if ('*~>%|'.includes(type)) {                            // n (or n pairs) of replies
    const count = type === '%' || type === '|' ? 2 * n : Math.max(n, 0);
    let pos = end + 2;
    for (let i = 0; i < count; i += 1) {
      const len = replyLength(buf, pos);
      if (len < 0) return -1;
      pos += len;
    }
    if (type === '|') {                                    // attributes precede a reply
      const len = replyLength(buf, pos);
      if (len < 0) return -1;
      pos += len;
    }
    return pos - at;
  }
  throw new Error(`redis-proxy: not a RESP reply: ${JSON.stringify(type)}`);
}

/** The first reply bytes of `raw` sent on a connection of its own: it has run. */
function runAlone(upstreamPath, raw) {
  return new Promise((resolve, reject) => {
    const side = net.createConnection(upstreamPath);
    side.once('error', reject);
    side.once('data', (reply) => { side.destroy(); resolve(reply); });
    side.write(raw);
  });
}

async function startProxy(upstreamPath) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lf-redis-proxy-'));
  const sockPath = path.join(dir, 'proxy.sock');
  let armed = null;                  // { mode, marker, resolve }
  const sockets = new Set();

  const server = net.createServer((client) => {
    const upstream = net.createConnection(upstreamPath);
    sockets.add(client);
    sockets.add(upstream);
    let buffered = Buffer.alloc(0);
    let replies = Buffer.alloc(0);
    let queue = Promise.resolve();   // requests are handled one after the other, in order
    let sent = 0;                    // requests written upstream
    let answered = 0;                // replies read from upstream
    let dropping = null;             // { at: the armed request's number, resolve }

    const close = () => { client.destroy(); upstream.destroy(); };
    client.on('error', close);
    upstream.on('error', close);
    client.on('close', () => { upstream.destroy(); sockets.delete(client); });
    upstream.on('close', () => { client.destroy(); sockets.delete(upstream); });

    upstream.on('data', (chunk) => {
      replies = Buffer.concat([replies, chunk]);
      for (;;) {
        let len;
        try {
          len = replyLength(replies);
        } catch (err) {
          close();                   // not a reply this proxy can frame: the test fails visibly
          throw err;
        }
        if (len < 0) return;
        const reply = replies.subarray(0, len);
        replies = replies.subarray(len);
        answered += 1;
        if (dropping && answered === dropping.at) {   // the armed request's reply: lost
          const done = dropping.resolve;
          dropping = null;
          close();
          done(Buffer.from(reply));
          return;
        }
        client.write(reply);
      }
    });
    const send = (raw) => { sent += 1; upstream.write(raw); };

    const handle = async (req) => {
      const hit = armed && req.args.some((a) => a.equals(armed.marker));
      if (!hit) { send(req.raw); return; }
      const { mode, resolve } = armed;
      armed = null;
      if (mode === 'twice') {
        const first = await runAlone(upstreamPath, req.raw);
        send(req.raw);
        resolve(first);
      } else {
        dropping = { at: sent + 1, resolve };
        send(req.raw);
      }
    };

    client.on('data', (chunk) => {
      buffered = Buffer.concat([buffered, chunk]);
      for (;;) {
        const req = takeRequest(buffered);
        if (!req) break;
        buffered = buffered.subarray(req.raw.length);
        queue = queue.then(() => handle(req)).catch(close);
      }
    });
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(sockPath, resolve);
  });

  return {
    path: sockPath,
    /** Lose the reply of the next request naming marker ('drop'), or run it twice ('twice'). */
    arm(mode, marker) {
      if (mode !== 'drop' && mode !== 'twice') throw new RangeError(`no such mode: ${mode}`);
      return new Promise((resolve) => { armed = { mode, marker: Buffer.from(marker), resolve }; });
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

module.exports = { startProxy, takeRequest, replyLength };
