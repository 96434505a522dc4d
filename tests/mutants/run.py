"""The mutation gate: every mutant in tests/mutants/*.py must be killed by the test it names.

Usage: python3 tests/mutants/run.py [--jobs N] [--timeout S] [--no-baseline] [--list] [NAME ...]

NAME picks mutants whose name contains it (default: all). The runner
  1. copies the working tree (tracked plus untracked-but-not-ignored files, so uncommitted work is gated too) into
     build/mutate/w0 .. w<N-1> (kept between runs, so a rerun builds incrementally; a lock serialises runs),
  2. validates every mutant against that copy (unique name, `old` occurs exactly once in `file`, `new` differs,
     the selector loads at least one test or names a unit test binary of the Makefile's UNIT_TESTS),
  3. builds the first copy once (`make all unit-bins`), gives the others its outputs, and runs each distinct
     selector once unmutated (the baseline: a test that fails without a mutant would "kill" anything),
  4. per mutant, in one of the copies: applies it, builds incrementally, runs the selector under a timeout, and
     puts the copy back as it was: the file with its old mtime, and every build output the mutant's build
     changed from a pristine copy of the first build's outputs (build/mutate/golden), so the next mutant
     compiles only its own file.
A mutant that does not build, or whose selector fails on the unmutated tree, is INVALID. Killed means the selected
tests failed or errored (a timeout counts as killed and is reported as such). Exit 1 if any mutant survived or is
invalid, 2 on a usage error. Each mutant's build and test output is in build/mutate/logs/NAME.log.
"""
import argparse
import fcntl
import importlib.util
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # loading the mutant lists must not litter tests/mutants/
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MUTANTS_DIR = os.path.join(ROOT, "tests", "mutants")
SCRATCH = os.path.join(ROOT, "build", "mutate")
LOGS = os.path.join(SCRATCH, "logs")
NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
FIELDS = ("name", "file", "old", "new", "test", "why")


def rel(path):
    return os.path.relpath(path, ROOT)


class Mutant:
    def __init__(self, d, origin):
        self.origin = origin          # the tests/mutants/*.py file it came from
        self.name = d.get("name")
        self.file = d.get("file")
        self.old = d.get("old")
        self.new = d.get("new")
        self.test = d.get("test")
        self.why = d.get("why")
        self.fields = d
        self.result = None            # killed | killed (timeout) | survived | invalid
        self.detail = ""
        self.seconds = 0.0
        self.build_seconds = 0.0


# ---------------------------------------------------------------------------------------------------------------
# Loading and validation

def load_mutants():
    """Returns (mutants, errors); errors are problems of whole files."""
    mutants, errors = [], []
    for fn in sorted(os.listdir(MUTANTS_DIR)):
        if not fn.endswith(".py") or fn == "run.py":
            continue
        path = os.path.join(MUTANTS_DIR, fn)
        spec = importlib.util.spec_from_file_location("mutants_" + fn[:-3], path)
        try:
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        except Exception as e:
            errors.append("%s: cannot load: %s: %s" % (rel(path), type(e).__name__, e))
            continue
        lst = getattr(mod, "MUTANTS", None)
        if not isinstance(lst, list):
            errors.append("%s: defines no list MUTANTS" % rel(path))
            continue
        for i, d in enumerate(lst):
            if not isinstance(d, dict):
                errors.append("%s: MUTANTS[%d] is not a dict" % (rel(path), i))
                continue
            mutants.append(Mutant(d, rel(path)))
    return mutants, errors


def unit_tests(tree):
    """The Makefile's UNIT_TESTS list: its := line and every += line after it (continuation lines included)."""
    with open(os.path.join(tree, "Makefile")) as f:
        text = f.read().replace("\\\n", " ")
    names = set()
    for m in re.finditer(r"^UNIT_TESTS\s*(?::=|\+=|=)\s*(.*)$", text, re.M):
        names.update(m.group(1).split())
    return names


def validate_fields(m):
    """Shape checks that need no tree. Returns a list of problems."""
    bad = []
    for k in FIELDS:
        if not isinstance(m.fields.get(k), str):
            bad.append("field %r missing or not a string" % k)
        elif not m.fields[k] and k != "new":  # an empty `new` deletes `old`: a dropped write
            bad.append("field %r is empty" % k)
    extra = set(m.fields) - set(FIELDS)
    if extra:
        bad.append("unknown field(s) %s" % ", ".join(sorted(extra)))
    if bad:
        return bad
    if not NAME_RE.match(m.name):
        bad.append("name is not kebab-case")
    if m.new == m.old:
        bad.append("new is the same as old")
    if os.path.isabs(m.file) or ".." in m.file.split("/"):
        bad.append("file must be a path relative to the repo root")
    return bad


def validate_in_tree(m, tree, units, listed):
    """Checks against the copied tree. listed: selector -> (ok, message) cache of `run.py --list`."""
    bad = []
    path = os.path.join(tree, m.file)
    if not os.path.isfile(path):
        return ["file %s does not exist" % m.file]
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        text = f.read()
    n = text.count(m.old)
    if n != 1:
        bad.append("old occurs %d times in %s (must be exactly once)" % (n, m.file))
    if m.test.startswith("unit:"):
        if m.test[5:] not in units:
            bad.append("%s: no unit test binary %r in the Makefile's UNIT_TESTS (%s)"
                       % (m.test, m.test[5:], " ".join(sorted(units))))
    else:
        if m.test not in listed:
            p = subprocess.run([sys.executable, "tests/integration/run.py", "--list", m.test], cwd=tree,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
            out = p.stdout.strip().splitlines()
            listed[m.test] = (p.returncode == 0, out[-1] if out else "rc %d" % p.returncode)
        ok, msg = listed[m.test]
        if not ok:
            bad.append("test selector %r: %s" % (m.test, msg))
    return bad


# ---------------------------------------------------------------------------------------------------------------
# The scratch copies

def source_files():
    p = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        sys.exit("mutate: git ls-files failed (the gate needs a git checkout): %s" % p.stderr.decode().strip())
    files = []
    for f in p.stdout.decode("utf-8", "surrogateescape").split("\0"):
        if f and os.path.isfile(os.path.join(ROOT, f)) and not os.path.islink(os.path.join(ROOT, f)):
            files.append(f)
    return sorted(set(files))


def snapshot(files):
    """Reads every source file once, so all copies get the same tree even while others edit it."""
    snap = {}
    for f in files:
        with open(os.path.join(ROOT, f), "rb") as fh:
            snap[f] = (fh.read(), os.stat(os.path.join(ROOT, f)).st_mode & 0o777)
    return snap


def sync(tree, snap):
    """Makes tree hold exactly snap's files. A changed file gets a new mtime (now), so make rebuilds what
    depends on it; an unchanged one keeps its mtime, so the build stays incremental. Returns files written."""
    manifest = os.path.join(tree, ".mutate-manifest")
    old = set()
    if os.path.exists(manifest):
        with open(manifest, encoding="utf-8", errors="surrogateescape") as fh:
            old = set(fh.read().split("\0")) - {""}
    for f in sorted(old - set(snap)):
        try:
            os.unlink(os.path.join(tree, f))
        except FileNotFoundError:
            pass
    written = 0
    for f, (data, mode) in snap.items():
        dst = os.path.join(tree, f)
        try:
            with open(dst, "rb") as fh:
                same = fh.read() == data
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            same = False
        if not same:
            # Now, not write_fresh's strictly rising mtimes: thousands of files a copy would run those
            # seconds ahead of the clock, past the outputs the first copy then builds for all of them.
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with open(dst + ".mutate-tmp", "wb") as fh:
                fh.write(data)
            os.replace(dst + ".mutate-tmp", dst)
            written += 1
        if os.stat(dst).st_mode & 0o777 != mode:
            os.chmod(dst, mode)
    with open(manifest, "w", encoding="utf-8", errors="surrogateescape") as fh:
        fh.write("\0".join(sorted(snap)))
    return written


def copy_outputs(src, dst, snap):
    """Copies every file of src that is not a source of snap (the build's outputs: build/, bin/, generated
    headers) into dst, keeping mtimes, so that dst's make finds them up to date. Sources are synced before any
    build, so each output is newer than the sources it came from in both copies."""
    for d, dirs, files in os.walk(src):
        dirs.sort()
        for f in files:
            path = os.path.join(d, f)
            r = os.path.relpath(path, src)
            if r in snap or r == ".mutate-manifest" or os.path.islink(path):
                continue
            out = os.path.join(dst, r)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            shutil.copy2(path, out)


# Where builds write, besides the generated headers beside their sources in src/.
OUTPUT_DIRS = ("bin", os.path.join("build", "rel"))


def output_files(tree, snap):
    """{relative path: (mtime_ns, size)} of every build output in tree: the files under OUTPUT_DIRS and the
    headers under src/ that are not sources."""
    out = {}
    for top in OUTPUT_DIRS + ("src",):
        for d, _, files in os.walk(os.path.join(tree, top)):
            for f in files:
                path = os.path.join(d, f)
                r = os.path.relpath(path, tree)
                if r in snap or os.path.islink(path) or (top == "src" and not f.endswith(".h")):
                    continue
                st = os.stat(path)
                out[r] = (st.st_mtime_ns, st.st_size)
    return out


def put_back(src, dst):
    """Copies src over dst with src's mtime, through a rename (dst may be a binary a test just ran)."""
    tmp = dst + ".mutate-tmp"
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copy2(src, tmp)
    os.replace(tmp, dst)


def restore_outputs(tree, golden, snap):
    """Makes tree's build outputs the golden ones again: each output the mutant's build wrote is copied back
    (mtime kept), each it added is removed. golden is (its directory, output_files of it)."""
    gdir, gfiles = golden
    now = output_files(tree, snap)
    for r, st in now.items():
        if r not in gfiles:
            os.unlink(os.path.join(tree, r))
        elif st != gfiles[r]:
            put_back(os.path.join(gdir, r), os.path.join(tree, r))
    for r in gfiles.keys() - now.keys():
        put_back(os.path.join(gdir, r), os.path.join(tree, r))


_mtime_lock = threading.Lock()
_last_mtime_ns = [0]


def write_fresh(path, data):
    """Writes data and gives the file an mtime strictly later than any we gave before and than now, so an
    incremental make sees the change even on a coarse-timestamp filesystem or within one clock tick."""
    tmp = path + ".mutate-tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
    with _mtime_lock:
        t = max(time.time_ns(), _last_mtime_ns[0] + 10_000_000)
        _last_mtime_ns[0] = t
    os.utime(tmp, ns=(t, t))
    os.replace(tmp, path)


# The copies build without optimisation or debug info (three times faster to compile and link, same behaviour),
# under a fixed version, so that version.h never changes between runs, and always into build/rel (OUTPUT_DIRS),
# whatever SAN or COV the caller's make passes down.
MAKE_VARS = ["OPT=-O0", "VERSION=mutate", "LDFLAGS=-fuse-ld=gold", "SAN=", "COV="]


def make(tree, targets, log, jobs):
    p = subprocess.run(["make", "--no-print-directory", "-j%d" % jobs] + MAKE_VARS + targets, cwd=tree, stdout=log,
                       stderr=subprocess.STDOUT)
    return p.returncode == 0


def build_targets(tree, test):
    """What a mutant's test needs rebuilt: a unit test its own binary; an integration test bin/otpd, and bin/otpctl
    only when the test's module runs otpctl (the other binaries of `all` do not link the library)."""
    if test.startswith("unit:"):
        return ["build/rel/tests/" + test[5:]]
    module = os.path.join(tree, "tests", "integration", test.split(".")[0] + ".py")
    try:
        with open(module, encoding="utf-8") as fh:
            runs_otpctl = "otpctl" in fh.read()
    except OSError:
        runs_otpctl = True
    return ["bin/otpd"] + (["bin/otpctl"] if runs_otpctl else [])


# Each copy's tests take their ports from a range of their own (tests/integration/harness.py, "Ports"), above the
# integration workers' band: set per copy name (w0, w1, ...) before the copies run.
COPY_PORTS = {}


def run_selector(tree, test, timeout_s, log):
    """Runs one selector. Returns 'pass', 'fail', 'timeout' or 'bad' (the selector itself is wrong)."""
    if test.startswith("unit:"):
        argv = [os.path.join("build", "rel", "tests", test[5:])]
    else:
        argv = [sys.executable, "tests/integration/run.py", "--failfast", test]
    log.write(("$ %s\n" % " ".join(argv)).encode())
    log.flush()
    env = dict(os.environ)
    env.pop("OTPD_KEEP", None)
    env["OTPD_TEST_PORTS"] = COPY_PORTS[os.path.basename(tree)]
    p = subprocess.Popen(argv, cwd=tree, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                         start_new_session=True)
    try:
        rc = p.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # SIGINT first so the tests' tearDown stops what they started; then everything in the group.
        try:
            os.killpg(p.pid, signal.SIGINT)
            p.wait(timeout=10)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        return "timeout"
    if rc == 0:
        return "pass"
    if rc == 2 and not test.startswith("unit:"):
        return "bad"
    return "fail"


# ---------------------------------------------------------------------------------------------------------------
# The gate

def run_mutant(m, tree, args):
    t0 = time.monotonic()
    path = os.path.join(tree, m.file)
    with open(path, "rb") as fh:
        orig = fh.read()
    orig_mtime_ns = os.stat(path).st_mtime_ns
    old, new = m.old.encode("utf-8", "surrogateescape"), m.new.encode("utf-8", "surrogateescape")
    with open(os.path.join(LOGS, m.name + ".log"), "wb") as log:
        try:
            if orig.count(old) != 1:
                m.result, m.detail = "invalid", "old no longer occurs exactly once in the copy"
                return
            write_fresh(path, orig.replace(old, new, 1))
            targets = build_targets(tree, m.test)
            if not make(tree, targets, log, args.make_jobs):
                m.result, m.detail = "invalid", "does not build"
                return
            m.build_seconds = time.monotonic() - t0
            r = run_selector(tree, m.test, args.timeout, log)
            if r == "pass":
                m.result = "survived"
            elif r == "fail":
                m.result = "killed"
            elif r == "timeout":
                m.result, m.detail = "killed (timeout)", "the test timed out after %d s" % args.timeout
            else:
                m.result, m.detail = "invalid", "the selector is bad in the copy"
        finally:
            # The copy as it was, so the next mutant's make compiles only what its own change needs: the outputs
            # first, then the file, its old mtime last. Stopped anywhere on the way, the copy is left with the
            # mutant's text (the next sync rewrites it) or a file newer than its outputs (make rebuilds them),
            # never with the mutant's outputs behind an old file.
            restore_outputs(tree, args.golden, args.snap)
            with open(path, "wb") as fh:
                fh.write(orig)
            os.utime(path, ns=(orig_mtime_ns, orig_mtime_ns))
            m.seconds = time.monotonic() - t0


def fmt_row(cols, widths):
    return "  ".join(str(c).ljust(w) for c, w in zip(cols, widths)).rstrip()


def print_table(mutants, wall_s):
    head = ("mutant", "test", "result", "build s", "seconds")
    rows = [(m.name, m.test, m.result or "not run", "%.1f" % m.build_seconds, "%.1f" % m.seconds) for m in mutants]
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    print()
    print(fmt_row(head, widths))
    print(fmt_row(["-" * w for w in widths], widths))
    for r in rows:
        print(fmt_row(r, widths))
    counts = {}
    for m in mutants:
        key = "killed" if (m.result or "").startswith("killed") else (m.result or "not run")
        counts[key] = counts.get(key, 0) + 1
    timeouts = sum(1 for m in mutants if m.result == "killed (timeout)")
    print("total: %d mutants, %d killed%s, %d survived, %d invalid; %.0f s wall"
          % (len(mutants), counts.get("killed", 0), " (%d by timeout)" % timeouts if timeouts else "",
             counts.get("survived", 0), counts.get("invalid", 0) + counts.get("not run", 0), wall_s))
    build_s = sum(m.build_seconds for m in mutants)
    print("time in the copies: %.0f s building, %.0f s testing" % (build_s, sum(m.seconds for m in mutants) - build_s))


def main(argv):
    ap = argparse.ArgumentParser(prog="tests/mutants/run.py", description="The mutation gate (issue 7).")
    ap.add_argument("names", nargs="*", metavar="NAME", help="run the mutants whose name contains NAME")
    ap.add_argument("--jobs", "-j", type=int, default=2, help="scratch copies run in parallel (default 2)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per test run (default 120)")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip running each selector on the unmutated tree first")
    ap.add_argument("--list", action="store_true", help="validate and list the mutants, run nothing")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    args.make_jobs = 2 if args.jobs == 1 else 1
    t_start = time.monotonic()

    mutants, file_errors = load_mutants()
    chosen = mutants
    if args.names:
        unmatched = [n for n in args.names if not any(n in (m.name or "") for m in mutants)]
        if unmatched:
            print("mutate: no mutant name contains %s" % ", ".join(map(repr, unmatched)), file=sys.stderr)
            for e in file_errors:
                print("mutate: " + e, file=sys.stderr)
            return 2
        chosen = [m for m in mutants if any(n in (m.name or "") for n in args.names)]
    for e in file_errors:
        # A file that cannot be read fails the whole gate; a run of picked mutants only warns about it.
        print(("warning: " if args.names else "INVALID ") + e)
    if args.names:
        file_errors = []
    if not chosen:
        print("mutate: no mutants found in tests/mutants/", file=sys.stderr)
        return 1

    problems = {}   # id(mutant) -> [problem]
    seen = {}
    for m in mutants:
        if m.name in seen and (m in chosen or seen[m.name] in chosen):
            for x in (m, seen[m.name]):
                problems.setdefault(id(x), []).append("name %r is also used in %s" % (m.name, (
                    seen[m.name] if x is m else m).origin))
        seen.setdefault(m.name, m)
    for m in chosen:
        problems.setdefault(id(m), []).extend(validate_fields(m))

    os.makedirs(SCRATCH, exist_ok=True)
    lock = open(os.path.join(SCRATCH, ".lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("mutate: another run holds %s; waiting for it" % rel(os.path.join(SCRATCH, ".lock")), flush=True)
        fcntl.flock(lock, fcntl.LOCK_EX)
        print("mutate: waited %.0f s for the lock; the times below start now" % (time.monotonic() - t_start),
              flush=True)
        t_start = time.monotonic()
    shutil.rmtree(LOGS, ignore_errors=True)
    os.makedirs(LOGS)

    snap = snapshot(source_files())
    trees = [os.path.join(SCRATCH, "w%d" % i) for i in range(min(args.jobs, len(chosen)))]
    size = 10000 // len(trees)
    for i in range(len(trees)):
        COPY_PORTS["w%d" % i] = "%d-%d" % (22000 + i * size, 22000 + (i + 1) * size - 1)
    for t in trees:
        os.makedirs(t, exist_ok=True)
        sync(t, snap)
    units = unit_tests(trees[0])
    listed = {}
    for m in chosen:
        if all(isinstance(m.fields.get(k), str) and m.fields.get(k) for k in ("file", "old", "test")):
            problems[id(m)].extend(validate_in_tree(m, trees[0], units, listed))
    invalid = [m for m in chosen if problems.get(id(m))]
    for m in invalid:
        m.result, m.detail = "invalid", "; ".join(problems[id(m)])
        print("INVALID %s (%s): %s" % (m.name or "?", m.origin, m.detail))
    runnable = [m for m in chosen if not problems.get(id(m))]
    if args.list:
        for m in runnable:
            print("%-40s %-45s %s" % (m.name, m.test, m.file))
        print("%d mutants valid, %d invalid" % (len(runnable), len(invalid) + len(file_errors)))
        return 1 if invalid or file_errors else 0

    # Build the first copy once, with both cores; the others get its outputs (mtimes kept), so their make only
    # checks that everything is up to date.
    t0 = time.monotonic()
    for i, t in enumerate(trees):
        if i > 0:
            copy_outputs(trees[0], t, snap)
        with open(os.path.join(LOGS, "build-%s.log" % os.path.basename(t)), "wb") as log:
            if not make(t, ["all", "unit-bins"], log, 2):
                print("mutate: the unmutated tree does not build in %s; see %s"
                      % (rel(t), rel(log.name)), file=sys.stderr)
                return 1
    # The pristine outputs each copy is put back to after each mutant.
    golden_dir = os.path.join(SCRATCH, "golden")
    shutil.rmtree(golden_dir, ignore_errors=True)
    gfiles = output_files(trees[0], snap)
    for r in gfiles:
        put_back(os.path.join(trees[0], r), os.path.join(golden_dir, r))
    args.golden, args.snap = (golden_dir, gfiles), snap
    print("built %d scratch cop%s in %.0f s" % (len(trees), "y" if len(trees) == 1 else "ies",
                                               time.monotonic() - t0), flush=True)

    # Baseline: each distinct selector must pass without a mutant.
    if not args.no_baseline:
        t0 = time.monotonic()
        sels = sorted({m.test for m in runnable})
        base = {}
        work = queue.Queue()
        for s in sels:
            work.put(s)

        def baseline_worker(tree):
            while True:
                try:
                    s = work.get_nowait()
                except queue.Empty:
                    return
                t1 = time.monotonic()
                fn = "baseline-" + re.sub(r"[^A-Za-z0-9_.-]", "_", s) + ".log"
                with open(os.path.join(LOGS, fn), "wb") as log:
                    r = run_selector(tree, s, args.timeout, log)
                    if r in ("fail", "timeout"):
                        # Once more: a baseline that fails only under the gate's
                        # own load is a flake to report, not a reason to drop
                        # its mutants. Failing twice makes them invalid.
                        print("baseline %-50s %-7s once; trying again" % (s, r), flush=True)
                        r = run_selector(tree, s, args.timeout, log)
                    base[s] = (r, fn)
                print("baseline %-50s %-7s %5.1f s" % (s, base[s][0], time.monotonic() - t1), flush=True)

        ths = [threading.Thread(target=baseline_worker, args=(t,)) for t in trees]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        for m in runnable:
            r, fn = base[m.test]
            if r != "pass":
                m.result = "invalid"
                m.detail = "%s on the unmutated tree (%s); see %s" % (
                    {"fail": "the test fails", "timeout": "the test times out", "bad": "bad selector"}[r],
                    m.test, rel(os.path.join(LOGS, fn)))
        print("baseline: %d selectors in %.0f s" % (len(sels), time.monotonic() - t0), flush=True)

    work = queue.Queue()
    for m in runnable:
        if m.result is None:
            work.put(m)
    out_lock = threading.Lock()

    def worker(tree):
        while True:
            try:
                m = work.get_nowait()
            except queue.Empty:
                return
            try:
                run_mutant(m, tree, args)
            except Exception as e:  # the gate must report, not hang or lose a mutant
                m.result, m.detail = "invalid", "runner error: %s: %s" % (type(e).__name__, e)
                with out_lock:
                    print("%s: runner error, copy %s is no longer used: %s" % (m.name, rel(tree), m.detail),
                          flush=True)
                return  # the copy may hold this mutant: its later mutants go to the other copies
            with out_lock:
                print("%-40s %-45s %-16s %5.1f s" % (m.name, m.test, m.result, m.seconds), flush=True)

    ths = [threading.Thread(target=worker, args=(t,)) for t in trees]
    for th in ths:
        th.start()
    for th in ths:
        th.join()

    print_table(chosen, time.monotonic() - t_start)
    bad = [m for m in chosen if m.result not in ("killed", "killed (timeout)")]
    for m in chosen:
        if m.result == "killed (timeout)":
            print("note: %s was killed by a timeout: %s" % (m.name, m.detail))
    for m in bad:
        why = m.detail or ("the test passed with the mutant applied (%s)" % m.why)
        log = os.path.join(LOGS, m.name + ".log")
        print("%s %s (%s): %s%s" % (m.result.upper(), m.name, m.origin, why,
                                    "; log %s" % rel(log) if os.path.exists(log) else ""))
    if file_errors:
        print("%d mutant file(s) could not be read (see INVALID above)" % len(file_errors))
    return 1 if bad or file_errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
