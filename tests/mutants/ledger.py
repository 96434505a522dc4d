"""Mutants for the ledger's accept path (src/ledger/ledger.c): the group of
verification, message and request rows that commits before the 202. Each a
small plausible bug, and the test that must catch it."""
MUTANTS = [
    dict(name="ledger-accept-answers-before-commit",
         file="src/ledger/ledger.c",
         old="""    ops[n++] = op_request(r);
    return ledger_submit(l, ops, n, 1, 1);""",
         new="""    ops[n++] = op_request(r);
    return ledger_submit(l, ops, n, 0, 1);""",
         test="test_api.IssueVerifyTest.test_accepted_only_when_the_rows_commit",
         why="the 202 goes out without waiting for the commit, so a failed commit still answers accepted"),
    dict(name="ledger-accept-skips-request-row",
         file="src/ledger/ledger.c",
         old="""    ops[n++] = op_request(r);
    return ledger_submit(l, ops, n, 1, 1);""",
         new="""    ops[n] = op_request(r);
    op_free(ops[n]);
    return ledger_submit(l, ops, n, 1, 1);""",
         test="test_api.IssueVerifyTest.test_issue_sms_wrong_right_reuse",
         why="the accepted issue's request row is left out of the group"),
    dict(name="ledger-accept-skips-verification-row",
         file="src/ledger/ledger.c",
         old="""    ops[n++] = op_verification_new(m->verification_id, m->phone, m->api_key, m->created_ms,
                                   verification_expires_ms);""",
         new="""    (void)verification_expires_ms;""",
         test="test_api.IssueVerifyTest.test_max_attempts_kills_the_code",
         why="the verification row is never written, so its guesses and end are not audited"),
    dict(name="ledger-group-failure-reported-ok",
         file="src/ledger/ledger.c",
         old="op->wait->rc = group_failed ? OTP_EIO : OTP_OK;",
         new="op->wait->rc = OTP_OK;",
         test="test_api.IssueVerifyTest.test_accepted_only_when_the_rows_commit",
         why="a group rolled back for a constraint is reported committed: 202 with no message row"),
    dict(name="ledger-group-not-rolled-back",
         file="src/ledger/ledger.c",
         old="""rc = ledger_txn(l, LT_ROLLBACK_TO);""",
         new="""rc = SQLITE_OK;""",
         test="test_api.IssueVerifyTest.test_accepted_only_when_the_rows_commit",
         why="a failed group keeps the rows before the failing one (a verification without its message)"),
]
