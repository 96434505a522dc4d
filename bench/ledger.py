"""The ledger writer's rows/s, before and after a change, in one run.

Builds bench/ledger_bench.c twice, against src/ledger and src/base of
BASE (a git revision, default: the chain's parent, kit-ledgerchain's fork
point from main) and of the work tree, then runs them in turns (A B A B
...) on the same disk, so both see the same load on a shared machine, and
prints each one's median rows/s and the ratio after/before. A row is one
row written to a ledger table (the chain's own links not counted).

Usage: python3 bench/ledger.py [--base REV] [--loops N] [--threads T] [--runs R] [--dir DIR]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(tree, out):
    """Compiles the bench against tree's ledger (tree has src/ and schema/)."""
    subprocess.run(["make", "-s", "-C", tree, "src/ledger/schema.h"], check=True)
    srcs = [os.path.join(tree, "src/ledger", f) for f in sorted(os.listdir(os.path.join(tree, "src/ledger")))
            if f.endswith(".c") and (f in ("ledger.c", "chain.c", "sha256.c") or f.startswith("ledger_"))]
    srcs += [os.path.join(tree, "src/base/clock.c"), os.path.join(tree, "src/base/rc.c")]
    # The writer times its commits into src/base/metrics (since the histograms); the chain's SHA-256 moved to
    # src/base (with the webhook's HMAC).
    # The writer logs a failed commit (src/base/log, with its timestamps). A move's states come from
    # src/base/msgstate.
    srcs += [p for p in [os.path.join(tree, "src/base", f)
                         for f in ("metrics.c", "sha256.c", "log.c", "timestamp.c", "msgstate.c")]
             if os.path.exists(p)]
    cflags = subprocess.run(["pkg-config", "--cflags", "--libs", "sqlite3"], capture_output=True, text=True,
                            check=True).stdout.split()
    subprocess.run(["cc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-pthread", "-I", tree, "-o", out,
                    os.path.join(ROOT, "bench/ledger_bench.c")] + srcs + cflags, check=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default=None)
    ap.add_argument("--loops", type=int, default=500)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where the ledgers go (a real disk: fsync matters)")
    a = ap.parse_args()
    base = a.base or subprocess.run(["git", "-C", ROOT, "merge-base", "HEAD", "main"], capture_output=True,
                                    text=True, check=True).stdout.strip()
    work = tempfile.mkdtemp(prefix="otpd-bench-ledger-", dir=a.dir)
    try:
        old = os.path.join(work, "old")
        os.mkdir(old)
        arch = subprocess.run(["git", "-C", ROOT, "archive", base, "src", "schema", "Makefile"], capture_output=True,
                              check=True).stdout
        subprocess.run(["tar", "-x", "-C", old], input=arch, check=True)
        build(old, os.path.join(work, "before"))
        build(ROOT, os.path.join(work, "after"))
        res = {"before": [], "after": []}
        for i in range(a.runs):
            for name in ("before", "after"):
                d = os.path.join(work, "run-%s-%d" % (name, i))
                os.mkdir(d)
                out = subprocess.run([os.path.join(work, name), d, str(a.loops), str(a.threads)], capture_output=True,
                                     text=True, check=True).stdout.split()
                res[name].append(float(out[1]))
                shutil.rmtree(d)
        b, f = statistics.median(res["before"]), statistics.median(res["after"])
        print("ledger writer, %d threads x %d loops x 10 rows, %d runs each, base %s" %
              (a.threads, a.loops, a.runs, base[:12]))
        print("before: median %.0f rows/s  %s" % (b, " ".join("%.0f" % x for x in res["before"])))
        print("after:  median %.0f rows/s  %s" % (f, " ".join("%.0f" % x for x in res["after"])))
        print("after/before: %.3f" % (f / b))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
