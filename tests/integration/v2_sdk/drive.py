"""Twilio's Python SDK (Debian's python3-twilio) driven by tests/integration/test_v2_sdk.py.

Run under /usr/bin/python3 (the interpreter Debian's package installs for; the test runner's python may not import
twilio). Reads one JSON request a line on stdin, {"op": ..., args}, makes that SDK call and writes one JSON line on
stdout: {"ok": result} or {"error": {...}} when the SDK raised. drive.js answers the same ops the same way with
twilio-node, so the test holds one copy of each scenario. Ops (clients are named, each pointed at otpd's /v2 by
client.verify.base_url, the SDK's own override):
  version                                          -> {sdk, runtime}
  client  name username password [account_sid] base_url
  service_create|service_fetch|service_update|service_delete  client [sid] [friendly_name] [code_length]
  service_list   client [page_size] [limit]        -> {sids}   (the SDK follows meta.next_page_url itself)
  service_pages  client page_size                  -> {pages}  (page(), then next_page() until there is none)
  ver_create     client service to channel [rate_limits] [locale] [app_hash]
                                                   (rate_limits: an object, which the SDK serializes as JSON)
  ver_fetch|ver_update  client service sid [status]
  check          client service code [to] [verification_sid]
  rl_create      client service unique_name [description]
  rl_fetch|rl_update|rl_delete  client service sid [description]
  rl_list        client service [page_size]        -> {items}  (each as rl_fetch answers)
  bk_create      client service rate_limit max interval
  bk_fetch|bk_update|bk_delete  client service rate_limit sid [max] [interval]
  bk_list        client service rate_limit [page_size]  -> {items}
Anything else on stdout would break the protocol: the SDK prints nothing there.
"""
import datetime
import json
import platform
import sys

import twilio
from twilio.base.exceptions import TwilioException, TwilioRestException
from twilio.rest import Client

clients = {}


def date(d):
    """A date field as the SDK gave it: parsed (a datetime) or not (the raw value)."""
    if isinstance(d, datetime.datetime):
        return {"parsed": True, "utc": d.utcoffset() == datetime.timedelta(0),
                "text": d.strftime("%Y-%m-%dT%H:%M:%SZ")}
    return {"parsed": False, "text": d}


def service(s):
    return {"sid": s.sid, "account_sid": s.account_sid, "friendly_name": s.friendly_name,
            "code_length": s.code_length, "lookup_enabled": s.lookup_enabled, "url": s.url,
            "date_created": date(s.date_created), "date_updated": date(s.date_updated)}


def verification(v):
    return {"sid": v.sid, "service_sid": v.service_sid, "account_sid": v.account_sid, "to": v.to,
            "channel": v.channel, "status": v.status, "valid": v.valid,
            "send_code_attempts": v.send_code_attempts, "url": v.url,
            "date_created": date(v.date_created), "date_updated": date(v.date_updated)}


def check(c):
    return {"sid": c.sid, "service_sid": c.service_sid, "account_sid": c.account_sid, "to": c.to,
            "channel": c.channel, "status": c.status, "valid": c.valid,
            "date_created": date(c.date_created)}


def rate_limit(r):
    return {"sid": r.sid, "service_sid": r.service_sid, "account_sid": r.account_sid, "unique_name": r.unique_name,
            "description": r.description, "url": r.url, "links": r.links,
            "date_created": date(r.date_created), "date_updated": date(r.date_updated)}


def bucket(b):
    return {"sid": b.sid, "rate_limit_sid": b.rate_limit_sid, "service_sid": b.service_sid,
            "account_sid": b.account_sid, "max": b.max, "interval": b.interval, "url": b.url,
            "date_created": date(b.date_created), "date_updated": date(b.date_updated)}


def given(req, *keys):
    """The request's fields named in keys that it has (the SDK's own names)."""
    return {k: req[k] for k in keys if req.get(k) is not None}


def run(req):
    op = req["op"]
    if op == "version":
        return {"sdk": "twilio-python " + twilio.__version__,
                "runtime": "%s %s" % (platform.python_implementation(), platform.python_version())}
    if op == "client":
        c = Client(req["username"], req["password"], account_sid=req.get("account_sid"))
        c.verify.base_url = req["base_url"]
        clients[req["name"]] = c
        return {}
    v2 = clients[req["client"]].verify.v2
    if op == "service_create":
        kw = {"friendly_name": req["friendly_name"]}
        if "code_length" in req:
            kw["code_length"] = req["code_length"]
        return service(v2.services.create(**kw))
    if op == "service_fetch":
        return service(v2.services(req["sid"]).fetch())
    if op == "service_update":
        return service(v2.services(req["sid"]).update(friendly_name=req["friendly_name"]))
    if op == "service_delete":
        return {"deleted": v2.services(req["sid"]).delete()}
    if op == "service_list":
        return {"sids": [s.sid for s in v2.services.list(limit=req.get("limit"), page_size=req.get("page_size"))]}
    if op == "service_pages":
        pages, page = [], v2.services.page(page_size=req["page_size"])
        while page is not None:
            pages.append([s.sid for s in page])
            page = page.next_page()
        return {"pages": pages}
    svc = v2.services(req["service"])
    if op == "ver_create":
        return verification(svc.verifications.create(to=req["to"], channel=req["channel"],
                                                     **given(req, "rate_limits", "locale", "app_hash")))
    if op == "ver_fetch":
        return verification(svc.verifications(req["sid"]).fetch())
    if op == "ver_update":
        return verification(svc.verifications(req["sid"]).update(status=req["status"]))
    if op == "check":
        return check(svc.verification_checks.create(code=req["code"], **given(req, "to", "verification_sid")))
    if op == "rl_create":
        return rate_limit(svc.rate_limits.create(unique_name=req["unique_name"], **given(req, "description")))
    if op == "rl_fetch":
        return rate_limit(svc.rate_limits(req["sid"]).fetch())
    if op == "rl_update":
        return rate_limit(svc.rate_limits(req["sid"]).update(**given(req, "description")))
    if op == "rl_delete":
        return {"deleted": svc.rate_limits(req["sid"]).delete()}
    if op == "rl_list":
        return {"items": [rate_limit(r) for r in svc.rate_limits.list(page_size=req.get("page_size"))]}
    rl = svc.rate_limits(req["rate_limit"]) if op.startswith("bk_") else None
    if op == "bk_create":
        return bucket(rl.buckets.create(max=req["max"], interval=req["interval"]))
    if op == "bk_fetch":
        return bucket(rl.buckets(req["sid"]).fetch())
    if op == "bk_update":
        return bucket(rl.buckets(req["sid"]).update(**given(req, "max", "interval")))
    if op == "bk_delete":
        return {"deleted": rl.buckets(req["sid"]).delete()}
    if op == "bk_list":
        return {"items": [bucket(b) for b in rl.buckets.list(page_size=req.get("page_size"))]}
    raise ValueError("unknown op %r" % op)


def main():
    for line in sys.stdin:
        req = json.loads(line)
        try:
            out = {"ok": run(req)}
        except TwilioRestException as e:
            out = {"error": {"class": type(e).__name__, "rest": True, "status": e.status, "code": e.code,
                             "message": e.msg, "method": e.method, "uri": e.uri}}
        except TwilioException as e:  # e.g. a list page that is not a 200: not a TwilioRestException
            out = {"error": {"class": type(e).__name__, "rest": False, "message": str(e.args[0]) if e.args else ""}}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
