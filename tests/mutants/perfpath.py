"""Mutants for issue 13's path (not the refusal cache): the ledger's index of
counted 4xx rows (src/ledger/ledger.c), the memo of phone parses
(src/base/phone.cc) and the verify that needs no commit (src/limits/limits_verify.c).
Each a small plausible bug, and the test that must catch it."""
MUTANTS = [
    dict(name="ledger-agg-index-keeps-flushed-rows",
         file="src/ledger/ledger_queue.c",
         old="""        ledger_agg_unindex_locked(l, op);
        *pp = op->next;""",
         new="""        *pp = op->next;""",
         test="unit:test_ledger",
         why="a committed (freed) row stays in its bucket: later refusals of its key count into it and are lost"),
    dict(name="ledger-agg-index-chain-head-only",
         file="src/ledger/ledger_queue.c",
         old="for (a = *bucket; a; a = a->agg_next)",
         new="for (a = *bucket; a; a = NULL)",
         test="unit:test_ledger",
         why="only the first row of a bucket is compared: keys sharing a bucket open a row per refusal"),
    dict(name="ledger-agg-row-not-indexed",
         file="src/ledger/ledger_queue.c",
         old="""    op->agg_next = *bucket;
    *bucket = op;""",
         new="""    op->agg_next = NULL;""",
         test="unit:test_ledger",
         why="a new counted row is listed but never found again: every refusal is a row of its own"),
    dict(name="ledger-agg-tail-stale-after-past-flush",
         file="src/ledger/ledger_queue.c",
         old="    l->agg_tail = kept;\n",
         new="    if (kept == NULL)\n        l->agg_tail = kept;\n",
         test="unit:test_ledger",
         why="after the writer commits a past second's last row, the next counted row is linked after it "
             "and never committed"),
    dict(name="phone-memo-any-entry-of-the-set",
         file="src/base/phone.cc",
         old="""    for (int w = 0; w < PHONE_MEMO_WAYS; w++)
        if (memcmp(set[w].key, s, n + 1) == 0) {""",
         new="""    for (int w = 0; w < PHONE_MEMO_WAYS; w++)
        if (set[w].key[0] != '\\0') {""",
         test="unit:test_phone",
         why="a lookup returns another number's parse from the same set: the wrong country, type and E.164"),
    dict(name="phone-memo-key-prefix",
         file="src/base/phone.cc",
         old="""        if (memcmp(set[w].key, s, n + 1) == 0) {
            set[w].used = ++sh->tick;""",
         new="""        if (memcmp(set[w].key, s, 4) == 0) {
            set[w].used = ++sh->tick;""",
         test="unit:test_phone",
         why="entries compared on the number's first digits only: a number in the set with the same "
             "country code answers for it"),
    dict(name="phone-memo-set-of-one",
         file="src/base/phone.cc",
         old="if (victim == NULL || (victim->key[0] != '\\0' && (set[w].key[0] == '\\0' || set[w].used < victim->used)))",
         new="if (victim == NULL)",
         test="unit:test_phone",
         why="every miss evicts a set's first entry: the memo holds one number per set (1/8 of its memory used)"),
    dict(name="verify-take-not-committed",
         file="src/limits/limits_verify.c",
         old="""        if (rep->ints[VR_COUNT + i * IR_PER_RULE + IR_RULE_OK] == 1)
            return 1;""",
         new="""        if (rep->ints[VR_COUNT + i * IR_PER_RULE + IR_RULE_OK] == 2)
            return 1;""",
         test="test_limits_more.VerifyRuleRoundTripsTest",
         why="a verify rule's take is left with its undo record: the record outlives the answer for the "
             "undo TTL"),
    dict(name="verify-wrong-guess-not-committed",
         file="src/limits/limits_verify.c",
         old="""    if (out->vid[0] != '\\0')
        return 1;""",
         new="""    if (out->vid[0] == '\\0')
        return 1;""",
         test="test_limits_more.VerifyRoundTripsTest",
         why="a guess on a live code keeps its undo record, and a verify that took nothing is committed"),
]
