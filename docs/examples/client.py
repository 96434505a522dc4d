#!/usr/bin/env python3
"""A minimal otpd client (Python 3, standard library only): issue a code, then
verify what the user types.

    OTPD_URL=http://127.0.0.1:8080 OTPD_KEY=<your API key> python3 client.py +919812345678 [device_id]

What it shows (docs/openapi.yaml has the whole contract):
  - a 429 or 503 is waited out for its Retry-After, never less;
  - every request carries an Idempotency-Key, so a retry after a lost answer
    gets the first answer instead of a second SMS. A key names one decision:
    a 429 is a decision and is replayed for its key, so the next try after a
    429 takes a new key; otpd's own failures (503) are not kept, so a retry
    after one may keep it;
  - clients branch on the problem's "error" code, never on its text.
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid

URL = os.environ.get("OTPD_URL", "http://127.0.0.1:8080").rstrip("/")
KEY = os.environ.get("OTPD_KEY", "")
GIVE_UP_S = 120  # a user will not wait longer than this for an SMS


def post(path, body, idempotency_key):
    """POSTs body as JSON; returns (status, headers, JSON answer)."""
    req = urllib.request.Request(URL + path, data=json.dumps(body).encode(), method="POST", headers={
        "Authorization": "Bearer " + KEY,
        "Content-Type": "application/json",
        "Idempotency-Key": idempotency_key,
    })
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, json.load(r)
    except urllib.error.HTTPError as e:  # 4xx and 5xx: an application/problem+json body
        return e.code, e.headers, json.load(e)


def issue(phone, device_id=None):
    """Asks for a code; waits out 429 and 503 answers. Returns the 202 body."""
    body = {"phone": phone, "purpose": "login"}
    if device_id:
        body["device_id"] = device_id
    deadline = time.monotonic() + GIVE_UP_S
    key = str(uuid.uuid4())
    while True:
        status, headers, answer = post("/v1/otp", body, key)
        if status == 202:
            return answer
        if status not in (429, 503):
            sys.exit("refused: %s %s (%s)" % (status, answer.get("error"), answer.get("detail")))
        wait_s = int(headers.get("Retry-After", "1"))
        if time.monotonic() + wait_s > deadline:
            sys.exit("refused: %s; try again in %d s" % (answer.get("error"), wait_s))
        what = answer.get("reason") or answer.get("error")
        print("rate limited (%s); retrying in %d s" % (what, wait_s) if status == 429 else
              "unavailable (%s); retrying in %d s" % (what, wait_s), flush=True)
        time.sleep(wait_s)
        if status == 429:
            key = str(uuid.uuid4())  # the 429 was this key's answer: ask anew


def verify(phone):
    """Reads guesses from stdin until one is right or the code is spent."""
    while True:
        print("code: ", end="", flush=True)
        guess = sys.stdin.readline().strip()
        if not guess:
            sys.exit("no code given")
        status, headers, answer = post("/v1/otp/verify", {"phone": phone, "code": guess, "purpose": "login"},
                                       str(uuid.uuid4()))
        if status == 200:
            print("verified (verification %s)" % answer["verification_id"], flush=True)
            return
        error = answer.get("error")
        if error == "invalid_code" and answer.get("attempts_left", 0) > 0:
            print("wrong code; %d attempts left" % answer["attempts_left"], flush=True)
        elif error == "invalid_request":
            print("not a code: %s" % answer.get("detail"), flush=True)
        elif status in (429, 503):
            sys.exit("%s; try again in %s s" % (error, headers.get("Retry-After")))
        else:  # no_active_code, or the last attempt was wrong: a new code is needed
            sys.exit("%s: ask for a new code" % error)


def main():
    if len(sys.argv) not in (2, 3) or not KEY:
        sys.exit("usage: OTPD_URL=... OTPD_KEY=... %s PHONE [DEVICE_ID]" % sys.argv[0])
    phone = sys.argv[1]
    sent = issue(phone, sys.argv[2] if len(sys.argv) == 3 else None)
    print("sent: message %s, code valid for %d s" % (sent["id"], sent["expires_in"]), flush=True)
    verify(phone)


if __name__ == "__main__":
    main()
