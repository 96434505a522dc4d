// A minimal otpd client (Node 18 or later, no packages): issue a code, then verify what the user types.
//
//   OTPD_URL=http://127.0.0.1:8080 OTPD_KEY=<your API key> node client.mjs +919812345678 [device_id]
//
// What it shows (docs/openapi.yaml has the whole contract):
//  - a 429 or 503 is waited out for its Retry-After, never less;
//  - every request carries an Idempotency-Key, so a retry after a lost answer gets the first answer instead of
//    a second SMS. A key names one decision: a 429 is a decision and is replayed for its key, so the next try
//    after a 429 takes a new key; otpd's own failures (503) are not kept, so a retry after one may keep it;
//  - clients branch on the problem's "error" code, never on its text.
import { randomUUID } from 'node:crypto';
import * as readline from 'node:readline';

const URL = (process.env.OTPD_URL || 'http://127.0.0.1:8080').replace(/\/$/, '');
const KEY = process.env.OTPD_KEY || '';
const GIVE_UP_S = 120; // a user will not wait longer than this for an SMS

function fail(text) {
  console.error(text);
  process.exit(1);
}

// POSTs body as JSON; returns {status, headers, answer}. 4xx and 5xx carry an application/problem+json body.
async function post(path, body, idempotencyKey) {
  const r = await fetch(URL + path, {
    method: 'POST',
    headers: {
      Authorization: 'Bearer ' + KEY,
      'Content-Type': 'application/json',
      'Idempotency-Key': idempotencyKey,
    },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(10000),
  });
  return { status: r.status, headers: r.headers, answer: await r.json() };
}

// Asks for a code; waits out 429 and 503 answers. Returns the 202 body.
async function issue(phone, deviceId) {
  const body = { phone, purpose: 'login' };
  if (deviceId) body.device_id = deviceId;
  const deadline = Date.now() + GIVE_UP_S * 1000;
  let key = randomUUID();
  for (;;) {
    const { status, headers, answer } = await post('/v1/otp', body, key);
    if (status === 202) return answer;
    if (status !== 429 && status !== 503) fail(`refused: ${status} ${answer.error} (${answer.detail})`);
    const waitS = parseInt(headers.get('Retry-After') || '1', 10);
    if (Date.now() + waitS * 1000 > deadline) fail(`refused: ${answer.error}; try again in ${waitS} s`);
    const what = answer.reason || answer.error;
    console.log(`${status === 429 ? 'rate limited' : 'unavailable'} (${what}); retrying in ${waitS} s`);
    await new Promise((done) => setTimeout(done, waitS * 1000));
    if (status === 429) key = randomUUID(); // the 429 was this key's answer: ask anew
  }
}

// Reads guesses from stdin until one is right or the code is spent.
async function verify(phone) {
  const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  for (;;) {
    process.stdout.write('code: ');
    const next = await lines.next();
    const guess = next.done ? '' : next.value.trim();
    if (!guess) fail('no code given');
    const { status, headers, answer } = await post('/v1/otp/verify', { phone, code: guess, purpose: 'login' },
      randomUUID());
    if (status === 200) {
      console.log(`verified (verification ${answer.verification_id})`);
      return;
    }
    if (answer.error === 'invalid_code' && answer.attempts_left > 0) {
      console.log(`wrong code; ${answer.attempts_left} attempts left`);
    } else if (answer.error === 'invalid_request') {
      console.log(`not a code: ${answer.detail}`);
    } else if (status === 429 || status === 503) {
      fail(`${answer.error}; try again in ${headers.get('Retry-After')} s`);
    } else {
      fail(`${answer.error}: ask for a new code`); // no_active_code, or the last attempt was wrong
    }
  }
}

const [phone, deviceId] = process.argv.slice(2);
if (!phone || !KEY) fail('usage: OTPD_URL=... OTPD_KEY=... node client.mjs PHONE [DEVICE_ID]');
const sent = await issue(phone, deviceId);
console.log(`sent: message ${sent.id}, code valid for ${sent.expires_in} s`);
await verify(phone);
process.exit(0);
