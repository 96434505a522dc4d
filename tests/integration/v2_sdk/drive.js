// Twilio's Node SDK (twilio, pinned in tests/openapi/package.json and installed into build/npm by
// `make npm-tools`) driven by tests/integration/test_v2_sdk.py: the ops of drive.py (see its doc), one JSON request a
// line on stdin, one JSON answer a line on stdout ({"ok": result} or {"error": {...}} when the SDK threw), in order.
// Clients are pointed at otpd's /v2 by client.verify.baseUrl, the SDK's own override.
"use strict";
const path = require("path");
const readline = require("readline");

const ROOT = path.resolve(__dirname, "..", "..", "..");
const MODULES = path.join(ROOT, "build", "npm", "node_modules");
const twilio = require(path.join(MODULES, "twilio"));
const SDK_VERSION = require(path.join(MODULES, "twilio", "package.json")).version;

const clients = {};

// A date field as the SDK gave it: parsed (a Date) or not (the raw value).
function date(d) {
  if (d instanceof Date)
    return { parsed: true, utc: true, text: isNaN(d) ? "Invalid Date" : d.toISOString().replace(/\.\d{3}Z$/, "Z") };
  return { parsed: false, text: d === undefined ? null : d };
}

const service = (s) => ({
  sid: s.sid, account_sid: s.accountSid, friendly_name: s.friendlyName, code_length: s.codeLength,
  lookup_enabled: s.lookupEnabled, url: s.url, date_created: date(s.dateCreated), date_updated: date(s.dateUpdated),
});

const verification = (v) => ({
  sid: v.sid, service_sid: v.serviceSid, account_sid: v.accountSid, to: v.to, channel: v.channel, status: v.status,
  valid: v.valid, send_code_attempts: v.sendCodeAttempts, url: v.url, date_created: date(v.dateCreated),
  date_updated: date(v.dateUpdated),
});

const check = (c) => ({
  sid: c.sid, service_sid: c.serviceSid, account_sid: c.accountSid, to: c.to, channel: c.channel, status: c.status,
  valid: c.valid, date_created: date(c.dateCreated),
});

const rateLimit = (r) => ({
  sid: r.sid, service_sid: r.serviceSid, account_sid: r.accountSid, unique_name: r.uniqueName,
  description: r.description, url: r.url, links: r.links, date_created: date(r.dateCreated),
  date_updated: date(r.dateUpdated),
});

const bucket = (b) => ({
  sid: b.sid, rate_limit_sid: b.rateLimitSid, service_sid: b.serviceSid, account_sid: b.accountSid, max: b.max,
  interval: b.interval, url: b.url, date_created: date(b.dateCreated), date_updated: date(b.dateUpdated),
});

// The request's fields named in keys that it has, under the SDK's camelCase names.
function pick(req, keys) {
  const out = {};
  for (const k of keys)
    if (req[k] !== undefined && req[k] !== null)
      out[k.replace(/_([a-z])/g, (m, c) => c.toUpperCase())] = req[k];
  return out;
}

async function run(req) {
  const op = req.op;
  if (op === "version")
    return { sdk: "twilio-node " + SDK_VERSION, runtime: "node " + process.version };
  if (op === "client") {
    const opts = req.account_sid ? { accountSid: req.account_sid } : {};
    const c = twilio(req.username, req.password, opts);
    c.verify.baseUrl = req.base_url;
    clients[req.name] = c;
    return {};
  }
  const v2 = clients[req.client].verify.v2;
  switch (op) {
    case "service_create":
      return service(await v2.services.create(pick(req, ["friendly_name", "code_length"])));
    case "service_fetch":
      return service(await v2.services(req.sid).fetch());
    case "service_update":
      return service(await v2.services(req.sid).update({ friendlyName: req.friendly_name }));
    case "service_delete":
      return { deleted: await v2.services(req.sid).remove() };
    case "service_list":
      return { sids: (await v2.services.list(pick(req, ["page_size", "limit"]))).map((s) => s.sid) };
    case "service_pages": {
      const pages = [];
      let page = await v2.services.page({ pageSize: req.page_size });
      while (page) {
        pages.push(page.instances.map((s) => s.sid));
        page = await page.nextPage();
      }
      return { pages };
    }
  }
  const svc = v2.services(req.service);
  switch (op) {
    case "ver_create":
      return verification(await svc.verifications.create(
        pick(req, ["to", "channel", "rate_limits", "locale", "app_hash"])));
    case "ver_fetch":
      return verification(await svc.verifications(req.sid).fetch());
    case "ver_update":
      return verification(await svc.verifications(req.sid).update({ status: req.status }));
    case "check":
      return check(await svc.verificationChecks.create(pick(req, ["code", "to", "verification_sid"])));
    case "rl_create":
      return rateLimit(await svc.rateLimits.create(pick(req, ["unique_name", "description"])));
    case "rl_fetch":
      return rateLimit(await svc.rateLimits(req.sid).fetch());
    case "rl_update":
      return rateLimit(await svc.rateLimits(req.sid).update(pick(req, ["description"])));
    case "rl_delete":
      return { deleted: await svc.rateLimits(req.sid).remove() };
    case "rl_list":
      return { items: (await svc.rateLimits.list(pick(req, ["page_size"]))).map(rateLimit) };
  }
  const rl = op.startsWith("bk_") ? svc.rateLimits(req.rate_limit) : null;
  switch (op) {
    case "bk_create":
      return bucket(await rl.buckets.create(pick(req, ["max", "interval"])));
    case "bk_fetch":
      return bucket(await rl.buckets(req.sid).fetch());
    case "bk_update":
      return bucket(await rl.buckets(req.sid).update(pick(req, ["max", "interval"])));
    case "bk_delete":
      return { deleted: await rl.buckets(req.sid).remove() };
    case "bk_list":
      return { items: (await rl.buckets.list(pick(req, ["page_size"]))).map(bucket) };
  }
  throw new Error("unknown op " + JSON.stringify(op));
}

(async () => {
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of rl) {
    const req = JSON.parse(line);
    let out;
    try {
      out = { ok: await run(req) };
    } catch (e) {
      if (!(e instanceof twilio.RestException))
        throw e;
      out = { error: { class: e.constructor.name, rest: true, status: e.status, code: e.code, message: e.message,
                       more_info: e.moreInfo } };
    }
    process.stdout.write(JSON.stringify(out) + "\n");
  }
})().catch((e) => {
  console.error("drive.js:", e);
  process.exit(1);
});
