"""Mutants for a message that changes owner (tests/integration/test_money_partition.py): an instance cut off from Redis
while another took its messages over never ends them nor gives their money back (queue.lua's end checks the owner,
refund.lua checks who ended the message and who marked the reservation, reserve.lua never uses another instance's
mark, the pacer skips the refund and records the truth in its ledger). Each a small plausible bug, and the test that
must catch it."""
REPRO = "test_money_partition.TakenOverRefundTest.test_refuse"
SCRIPTS = "test_money_partition.OwnerScriptTest"
MUTANTS = [
    dict(name="partition-end-no-owner-check",
         file="src/pacer/queue.lua",
         old="  if own ~= me then\n",
         new="  if false then\n",
         test=REPRO,
         why=("queue.lua's end does not ask who owns the entry: the partitioned instance's late 'expired' ends a "
              "message another instance sent, and its ledger claims an end that was not its own")),
    dict(name="partition-end-old-owner-counts-as-ended",
         file="src/pacer/queue.lua",
         old="if not own and m[2] == me then return 0 end",
         new="if not own then return 0 end",
         test=SCRIPTS + ".test_an_end_by_the_old_owner_changes_nothing_but_a_sent",
         why=("a late end after the new owner ended the message answers 'ended already' as if it were its own: "
              "the old owner goes on to refund and to write a false end in its ledger")),
    dict(name="partition-end-stale-sent-dropped",
         file="src/pacer/queue.lua",
         old="if ARGV[4] == 'sent' and s and not FINAL[s] then write() end",
         new="",
         test=SCRIPTS + ".test_an_end_by_the_old_owner_changes_nothing_but_a_sent",
         why=("a call the old owner put on the wire was accepted, but its 'sent' is dropped with the rest of its "
              "late end: the new owner sends the code again")),
    dict(name="partition-end-records-no-ender",
         file="src/pacer/queue.lua",
         old="  redis.call('HSET', KEYS[2], 'o', me)\n  redis.call('PEXPIRE', KEYS[2], 86400000)\n  -- A sent message keeps",
         new="  redis.call('PEXPIRE', KEYS[2], 86400000)\n  -- A sent message keeps",
         test="test_money.AttemptClassTest.test_400_is_not_billed_and_refunded",
         why=("the end does not record who ended the message: refund.lua finds no owner and keeps every "
              "reservation, even one that never reached the provider")),
    dict(name="partition-retry-overwrites-a-final-state",
         file="src/pacer/queue.lua",
         old="  if not FINAL[redis.call('HGET', KEYS[2], 's')] then redis.call('HSET', KEYS[2], 's', 'queued', 'd', ARGV[4]) end",
         new="  redis.call('HSET', KEYS[2], 's', 'queued', 'd', ARGV[4])",
         test=SCRIPTS + ".test_a_retry_keeps_a_final_state",
         why=("a retry puts back to 'queued' a message the old owner's accepted call (or a delivery report) "
              "ended 'sent': it is sent again")),
    dict(name="partition-refund-any-consumer",
         file="src/limits/refund.lua",
         old="if me == '' or m[7] ~= me then return {3, 0} end",
         new="",
         test=SCRIPTS + ".test_a_refund_only_by_the_consumer_that_ended_it",
         why=("refund.lua gives money back to whoever asks: a stale refund of the partitioned instance passes "
              "whenever a caller forgets to skip it")),
    dict(name="partition-refund-of-a-foreign-mark",
         file="src/limits/refund.lua",
         old="if u >= idx and m[8] ~= me then return {3, 0} end",
         new="",
         test=SCRIPTS + ".test_a_refund_never_of_a_reservation_another_consumer_marked_used",
         why=("an instance that got a message back gives back the reservation another instance marked used for "
              "a call of its own, which the provider may bill")),
    dict(name="partition-use-rides-a-foreign-mark",
         file="src/limits/reserve.lua",
         old="if (mode == 2 or (mode == 1 and m[7] ~= me)) and need <= u then need = u + 1 end",
         new="if mode == 2 and need <= u then need = u + 1 end",
         test=SCRIPTS + ".test_a_use_never_rides_on_another_consumers_mark",
         why=("an arm that raced a takeover marks the reservation the new owner already marked: two calls on "
              "one reservation, the caps count one")),
    dict(name="partition-use-mark-names-nobody",
         file="src/limits/reserve.lua",
         old="if mode == 1 then redis.call('HSET', msg_key, 'u', idx, 'uo', me) end",
         new="if mode == 1 then redis.call('HSET', msg_key, 'u', idx) end",
         test=SCRIPTS + ".test_a_use_never_rides_on_another_consumers_mark",
         why=("a use mark on a new reservation does not say whose it is: the same instance asking again takes "
              "yet another reservation, and a refund of it is refused")),
    dict(name="partition-use-mark-on-held-names-nobody",
         file="src/limits/reserve.lua",
         old="    redis.call('HSET', msg_key, 'u', r, 'uo', me)",
         new="    redis.call('HSET', msg_key, 'u', r)",
         test=SCRIPTS + ".test_a_use_never_rides_on_another_consumers_mark",
         why=("the use mark of the reservation a message holds does not say whose it is: another instance may "
              "ride on it, and its own refund of it is refused")),
    dict(name="partition-unuse-of-a-foreign-mark",
         file="src/limits/reserve.lua",
         old="f < need and m[6] == 'queued' and m[7] == me then",
         new="f < need and m[6] == 'queued' then",
         test="test_money_stop.UnuseScriptTest",
         why=("a stopping instance gives back a use mark another instance made for a call of its own: that "
              "call's price is then counted for nothing")),
    dict(name="partition-pacer-refunds-when-taken-over",
         file="src/pacer/pacer_jobs.c",
         old="        pacer_taken_over(pc, it);\n        return;\n    }\n    if (it->ledger_end)",
         new="        if (it->refund)\n            pacer_refund(pc, it);\n        pacer_taken_over(pc, it);\n"
             "        return;\n    }\n    if (it->ledger_end)",
         test=REPRO,
         why=("the pacer asks for a refund though its end was refused as taken over: only refund.lua's own check "
              "stands between the partitioned instance and money another instance spent")),
    dict(name="partition-pacer-ledger-claims-the-end",
         file="src/pacer/pacer_jobs.c",
         old="        pacer_taken_over(pc, it);\n        return;\n    }\n    if (it->ledger_end)",
         new="        if (it->ledger_end)\n            pacer_ended(pc, it);\n        pacer_item_free(pc, it);\n"
             "        return;\n    }\n    if (it->ledger_end)",
         test=REPRO,
         why=("the partitioned instance's ledger says 'expired' for a message another instance sent")),
]
