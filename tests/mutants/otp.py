"""Mutants for otp (src/otp/otp.c): issue and verify (delivery reports: reports.py).
Each a small plausible bug, and the test that must catch it."""
MUTANTS = [
    dict(name="otp-exhausted-one-guess-late",
         file="src/otp/otp.c",
         old="""verification_update(o, lv->vid, lv->attempts_left > 0 ? "pending" : "exhausted", 1);""",
         new="""verification_update(o, lv->vid, lv->attempts_left >= 0 ? "pending" : "exhausted", 1);""",
         test="test_api.IssueVerifyTest.test_max_attempts_kills_the_code",
         why="the last allowed wrong guess leaves the verification 'pending' in the ledger"),
    dict(name="otp-no-refund-on-ledger-failure",
         file="src/otp/otp.c",
         old="    limits_abandon(o->d.limits, &li.undo);\n    out->retry_after_s = 1;",
         new="    out->retry_after_s = 1;",
         test="test_api.LedgerFailureRefundTest",
         why=("an issue refused for the ledger keeps its takes and cost reservation: the budget drains with no SMS")),
    dict(name="otp-slot-leak-on-ledger-failure",
         file="src/limits/issue.lua",
         old="  if rec.m and redis.call('ZREM', holds_key, rec.m) == 1 then redis.call('DEL', msg_key) end\n",
         new="",
         test="test_api.LedgerFailureRefundTest",
         why=("an issue refused for the ledger keeps its place in the queue (its hold, until it lapses): the queue "
              "fills with nothing in it")),
    dict(name="otp-no-active-code-recorded-as-400",
         file="src/otp/otp.c",
         old="rq, kind, row->error, a->reason, shadow, vid, NULL, row->http_status);",
         new="rq, kind, row->error, a->reason, shadow, vid, NULL, a->rc == OTP_ENOTFOUND ? 400 : row->http_status);",
         test="test_api.IssueVerifyTest.test_issue_sms_wrong_right_reuse",
         why="the audit row of a verify with no live code says 400 while the caller got 404"),
]
