#!/bin/sh
# run.sh SECONDS TARGET...: for each target, first run every seed of
# tests/fuzz/corpus/TARGET/ once with OTPD_FUZZ_SEEDS=1 (a seed that does not
# parse fails: it would start the fuzzer in the shallows), then fuzz for
# SECONDS from a copy of the seeds in build/fuzz/corpus/TARGET/. Seeds named
# regress-* are inputs that once crashed; they are run, but need not parse.
# tests/fuzz/TARGET.dict, when there is one, lists the tokens of the format.
# FUZZ_JOBS (default 1) targets run at once, each single-threaded, each with its
# own log; a target's report is printed when its batch ends.
# Crash inputs land in build/fuzz/. Exits 1 if any target failed.
set -u
secs=$1
shift
jobs=${FUZZ_JOBS:-1}

# fuzz_one T: seeds, then the timed run; its report goes to build/fuzz/T.report,
# and build/fuzz/T.failed exists when it failed.
fuzz_one() {
    t=$1 bin=build/fuzz/fuzz_$1 seeds=tests/fuzz/corpus/$1 work=build/fuzz/corpus/$1
    out=build/fuzz/$t.report
    rm -f build/fuzz/$t.failed
    echo "== fuzz_$t: seeds" >"$out"
    parse=$(ls -d $seeds/* 2>/dev/null | grep -v '/regress-')
    if [ -z "$parse" ]; then
        echo "no seeds in $seeds" >>"$out"
        touch build/fuzz/$t.failed
        return
    fi
    if ! OTPD_FUZZ_SEEDS=1 $bin $parse >build/fuzz/$t.seeds.log 2>&1 ||
        ! $bin $seeds/* >>build/fuzz/$t.seeds.log 2>&1; then
        tail -n 20 build/fuzz/$t.seeds.log >>"$out"
        touch build/fuzz/$t.failed
        return
    fi
    echo "== fuzz_$t: ${secs}s" >>"$out"
    rm -rf "$work" && mkdir -p "$work" && cp $seeds/* "$work"/
    dict=""
    [ -f tests/fuzz/$t.dict ] && dict=-dict=tests/fuzz/$t.dict
    if ! $bin $dict -max_total_time="$secs" -max_len=8192 -print_final_stats=1 -artifact_prefix=build/fuzz/$t- \
        "$work" >build/fuzz/$t.log 2>&1; then
        tail -n 40 build/fuzz/$t.log >>"$out"
        touch build/fuzz/$t.failed
        return
    fi
    grep -E '^#[0-9]+.*DONE' build/fuzz/$t.log | tail -n 1 >>"$out"
    grep -E 'stat::(number_of_executed_units|average_exec_per_sec)' build/fuzz/$t.log >>"$out"
}

batch=""
n=0
flush() {
    wait
    for b in $batch; do
        cat build/fuzz/$b.report
    done
    batch="" n=0
}
for t in "$@"; do
    fuzz_one "$t" &
    batch="$batch $t" n=$((n + 1))
    [ "$n" -ge "$jobs" ] && flush
done
flush

failed=""
for t in "$@"; do
    [ -f build/fuzz/$t.failed ] && failed="$failed $t"
done
if [ -n "$failed" ]; then
    echo "fuzz: FAILED:$failed (see build/fuzz/*.log and build/fuzz/*-crash-*)"
    exit 1
fi
echo "fuzz: every target ran ${secs}s without a finding"
