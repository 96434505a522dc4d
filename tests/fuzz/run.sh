#!/bin/sh
# run.sh SECONDS TARGET...: for each target, first run every seed of
# tests/fuzz/corpus/TARGET/ once with OTPD_FUZZ_SEEDS=1 (a seed that does not
# parse fails: it would start the fuzzer in the shallows), then fuzz for
# SECONDS from a copy of the seeds in build/fuzz/corpus/TARGET/. Seeds named
# regress-* are inputs that once crashed; they are run, but need not parse.
# tests/fuzz/TARGET.dict, when there is one, lists the tokens of the format.
# Crash inputs land in build/fuzz/. Exits 1 if any target failed.
set -u
secs=$1
shift
failed=""
for t in "$@"; do
    bin=build/fuzz/fuzz_$t seeds=tests/fuzz/corpus/$t work=build/fuzz/corpus/$t
    echo "== fuzz_$t: seeds"
    parse=$(ls -d $seeds/* 2>/dev/null | grep -v '/regress-')
    if [ -z "$parse" ]; then
        echo "no seeds in $seeds"
        failed="$failed $t"
        continue
    fi
    if ! OTPD_FUZZ_SEEDS=1 $bin $parse >build/fuzz/$t.seeds.log 2>&1 ||
        ! $bin $seeds/* >>build/fuzz/$t.seeds.log 2>&1; then
        tail -n 20 build/fuzz/$t.seeds.log
        failed="$failed $t"
        continue
    fi
    echo "== fuzz_$t: ${secs}s"
    rm -rf "$work" && mkdir -p "$work" && cp $seeds/* "$work"/
    dict=""
    [ -f tests/fuzz/$t.dict ] && dict=-dict=tests/fuzz/$t.dict
    if ! $bin $dict -max_total_time="$secs" -max_len=8192 -print_final_stats=1 -artifact_prefix=build/fuzz/$t- \
        "$work" >build/fuzz/$t.log 2>&1; then
        tail -n 40 build/fuzz/$t.log
        failed="$failed $t"
        continue
    fi
    grep -E '^#[0-9]+.*DONE' build/fuzz/$t.log | tail -n 1
    grep -E 'stat::(number_of_executed_units|average_exec_per_sec)' build/fuzz/$t.log
done
if [ -n "$failed" ]; then
    echo "fuzz: FAILED:$failed (see build/fuzz/*.log and build/fuzz/*-crash-*)"
    exit 1
fi
echo "fuzz: every target ran ${secs}s without a finding"
