#!/usr/bin/env python3
"""Self-test for tests/kannel/kannel.py: real Kannel + fakesmsc on loopback.

Run: python3 tests/kannel/test_kannel_smoke.py   (last line: "N passed, M failed")
Set KANNEL_KEEP=1 to keep the temp workdir (logs) afterwards.
"""

import os
import shutil
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kannel import (DlrListener, Kannel, KannelError,  # noqa: E402
                    parse_fakesmsc_output, reassemble)

TO = "+919812345678"
TEXT = "123456 is your login code"


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def test_parse_fakesmsc_output():
    raw = (b"2026-11-30 04:21:04 [3218] [0] INFO: fakesmsc starting\n"
           b"2026-11-30 04:21:09 [3218] [0] DEBUG: Got message 1: <OTPD +919812345678 text 123456 is your login code>\n"
           b"2026-11-30 04:21:09 [3218] [0] DEBUG: Got message 2: <OTPD +919812345678 text line1>\n"
           b"2026-11-30 04:21:09 [3218] [0] DEBUG: Got message 3: <line2%+&=>\n"
           b"2026-11-30 04:21:19 [3218] [0] DEBUG: Got message 4: <OTPD +919812345678 ucs-2 %04%1F%04%40%048%042%045%04B%00++%AC>\n"
           b"2026-11-30 04:21:19 [3218] [0] DEBUG: Got message 5: <OTPD +919812345678 data abc%01%2B>\n"
           b"2026-11-30 04:21:19 [3218] [0] DEBUG: Got message 6: <OTPD +919812345678 udh %05%00%03%01%02%01 data hi+there>\n"
           b"2026-11-30 04:21:19 [3218] [0] DEBUG: Got message 7: <My Bank 919812345678 text x>\n"
           b"2026-11-30 04:21:19 [3218] [0] DEBUG: Got message 8: <OTPD +919812345678 udh %05%00%03%01%02%02 data +again>\n")
    m = parse_fakesmsc_output(raw)
    check(len(m) == 7, m)
    check((m[0]["sender"], m[0]["receiver"], m[0]["text"]) == ("OTPD", TO, TEXT), m[0])
    check(m[1]["text"] == "line1\nline2%+&=", m[1])
    check(m[2]["text"] == "\u041f\u0440\u0438\u0432\u0435\u0442 \u20ac", m[2])
    check(m[3]["data"] == b"abc\x01+", m[3])
    check(m[4]["udh"] == b"\x05\x00\x03\x01\x02\x01" and m[4]["text"] == "hi there", m[4])
    check((m[5]["sender"], m[5]["receiver"], m[5]["text"]) == ("My Bank", "919812345678", "x"), m[5])
    r = reassemble(m)
    check(len(r) == 6 and r[4]["text"] == "hi there again" and r[4]["complete"], r[4])


def test_send_receive_dlr():
    workdir = tempfile.mkdtemp(prefix="kannel-smoke-")
    keep = bool(os.environ.get("KANNEL_KEEP"))
    ok = False
    try:
        with DlrListener() as dlr:
            k = Kannel(workdir, user="otpd", password="s3cret")
            try:
                took = k.start(timeout=20)
                print("  kannel startup: %.2fs (ports sendsms=%d admin=%d box=%d smsc=%d)"
                      % (took, k.sendsms_port, k.admin_port, k.smsbox_port, k.smsc_port))
                t0 = time.monotonic()
                status, body = k.send(TO, TEXT, sender="OTPD", dlr_mask=31,
                                      dlr_url=dlr.dlr_url("smoke-1"))
                check((status, body.strip()) == (202, "0: Accepted for delivery"),
                      "sendsms answered %r %r" % (status, body))
                msgs = k.wait_received(1, timeout=10)
                t_recv = time.monotonic() - t0
                check(len(msgs) == 1, msgs)
                m = msgs[0]
                check(m["receiver"] == TO, "receiver %r" % m["receiver"])
                check(m["sender"] == "OTPD", "sender %r" % m["sender"])
                check(m["text"] == TEXT, "text %r" % m["text"])
                reports = dlr.wait_for(tag="smoke-1", types={8, 1}, timeout=10)
                t_dlr = time.monotonic() - t0
                types = [r["type"] for r in reports]
                print("  received after %.3fs, DLR types %s after %.3fs"
                      % (t_recv, types, t_dlr))
                for r in reports:
                    check(r["query"].get("to") == TO, r)
                    check(r["query"].get("smsc") == k.smsc_id, r)
                # wrong password must be refused
                status, body = k.send(TO, TEXT, password="wrong")
                check(status == 403, "bad password answered %r %r" % (status, body))
            finally:
                t1 = time.monotonic()
                procs = list(k.procs.values())
                k.stop()
                print("  kannel stop: %.2fs" % (time.monotonic() - t1))
            for p in procs:
                check(p.poll() is not None, "process %d still running" % p.pid)
        ok = True
    finally:
        if keep or not ok:
            print("  workdir kept: %s" % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


TESTS = [test_parse_fakesmsc_output, test_send_receive_dlr]


def main():
    passed = failed = 0
    for t in TESTS:
        t0 = time.monotonic()
        try:
            t()
        except (AssertionError, KannelError, OSError) as e:
            failed += 1
            print("FAIL %s (%.2fs): %s" % (t.__name__, time.monotonic() - t0, e))
            if not isinstance(e, AssertionError):
                traceback.print_exc()
        except Exception:
            failed += 1
            print("FAIL %s: unexpected error" % t.__name__)
            traceback.print_exc()
        else:
            passed += 1
            print("ok   %s (%.2fs)" % (t.__name__, time.monotonic() - t0))
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
