"""Mutants for otpctl ledger (src/ledger/history.c reads and merges the
ledgers, cmd/otpctl/ledger.c parses and prints): the merge by time, the
phone filter across ledgers, the time bounds and the read-only open. Each a
small plausible bug, and the test that must catch it."""
T = "test_otpctl_ledger.FleetLedgerTest."
MUTANTS = [
    dict(name="otpctl-merge-ignores-time",
         file="src/ledger/history.c",
         old="""    if (ta != tb)
        return ta < tb;""",
         new="""    if (ta != tb)
        return 0;""",
         test=T + "test_json_is_one_history_merged_by_time",
         why="the files are concatenated, not merged: ledger 1's rows all come before ledger 2's"),
    dict(name="otpctl-phone-only-local-messages",
         file="src/ledger/history.c",
         old='''"(?1 IS NULL OR m.phone = ?1 OR " alias ".message_id IN temp.history_ids) AND "''',
         new='''"(?1 IS NULL OR m.phone = ?1) AND "''',
         test=T + "test_follows_a_message_into_another_ledger",
         why="--phone drops the sends and reports another instance wrote for the phone's message "
             "(its messages row is in the accepting instance's ledger)"),
    dict(name="otpctl-since-exclusive",
         file="src/ledger/history.c",
         old="FROM requests r WHERE (?1 IS NULL OR r.phone = ?1) AND r.ts_ms >= ?2",
         new="FROM requests r WHERE (?1 IS NULL OR r.phone = ?1) AND r.ts_ms > ?2",
         test=T + "test_since_and_until",
         why="--since drops the requests of its own millisecond, unlike every other row"),
    dict(name="otpctl-stopped-ledger-gets-a-wal",
         file="src/ledger/ro.c",
         old="ro_uri(path, stat(wal, &sb) != 0 && errno == ENOENT)",
         new="ro_uri(path, 0)",
         test=T + "test_read_when_stopped_changes_nothing",
         why="a ledger no otpd has open is opened plain read-only, and SQLite leaves -wal and -shm files "
             "beside it, owned by whoever ran otpctl"),
    dict(name="otpctl-phone-as-typed",
         file="cmd/otpctl/ledger.c",
         old="filter->phone = pi->e164;",
         new="filter->phone = o->phone;",
         test=T + "test_phone_filter",
         why="--phone +4407400123456 finds nothing: the ledgers hold the canonical +447400123456"),
]
