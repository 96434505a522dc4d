"""Runs the integration tests and prints 'N passed, N failed, N skipped'.

Usage: python3 tests/integration/run.py [--list] [--failfast] [--jobs N] [SELECTOR ...]

With no selector every tests/integration/test_*.py runs. A selector is either
  - a substring of a module's file name ('limits' runs test_limits.py and any other match), or
  - a dotted name: 'test_limits.FailClosedTest' or 'test_limits.FailClosedTest.test_x' (exact names).
A selector that selects nothing is an error (exit 2): a typo must never pass as "0 tests ran".
--list prints the selected test ids and their count without running them.
--failfast stops at the first failure or error (the mutation gate needs one failure, not all of them).
--jobs N (default 1) runs the selected tests in N worker processes, one TestCase class at a time in a child of its
own, its output printed when it ends; the slowest classes start first (a class that takes long says so with
RUN_SECONDS, roughly its time on an idle machine; the others are guessed at two seconds a test), and a class that
sets RUN_APART = True has each test run as a unit of its own (long tests with nothing shared). A module that
measures time or load (its class or its module sets SERIAL = True) runs after them, alone (a module's serial
tests together), so no other test's load skews its figures; a class of such a module that measures nothing sets
SERIAL = False and runs with the others. The slowest units' times are printed at the end.

Exit codes: 0 all selected tests passed, 1 a test failed or errored, 2 a bad selector.
"""
import importlib
import os
import queue
import re
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402  (after the path)


class SelectorError(Exception):
    pass


def module_names():
    return sorted(n[:-3] for n in os.listdir(HERE) if n.startswith("test_") and n.endswith(".py"))


def import_module(name):
    if name not in module_names():
        raise SelectorError("no module tests/integration/%s.py" % name)
    try:
        return importlib.import_module(name)
    except Exception as e:  # a broken test module is a bad selection, not a test failure
        raise SelectorError("cannot import %s: %s: %s" % (name, type(e).__name__, e))


def resolve(loader, sel):
    """Returns a suite for one selector or raises SelectorError."""
    if sel.endswith(".py"):  # a file name or path: select that module exactly
        sel = os.path.basename(sel)[:-3]
        if "." in sel:
            raise SelectorError("%r is not a test module name" % sel)
        return loader.loadTestsFromModule(import_module(sel))
    if "." not in sel:
        names = [n for n in module_names() if sel in n]
        if not names:
            raise SelectorError("no module name contains %r" % sel)
        suite = unittest.TestSuite()
        for n in names:
            suite.addTests(loader.loadTestsFromModule(import_module(n)))
        return suite
    parts = sel.split(".")
    if len(parts) > 3:
        raise SelectorError("%r: expected module.Class or module.Class.test_method" % sel)
    parent, obj = None, import_module(parts[0])
    for i, part in enumerate(parts[1:], 1):
        if not hasattr(obj, part):
            raise SelectorError("%s has no attribute %r" % (".".join(parts[:i]), part))
        parent, obj = obj, getattr(obj, part)
    if isinstance(obj, type) and issubclass(obj, unittest.TestCase):
        return loader.loadTestsFromTestCase(obj)
    if len(parts) == 3 and isinstance(parent, type) and issubclass(parent, unittest.TestCase) and \
            callable(obj) and part.startswith(loader.testMethodPrefix):
        return unittest.TestSuite([parent(part)])
    raise SelectorError("%r is neither a TestCase class nor a test method of one" % sel)


def test_ids(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from test_ids(t)
        else:
            yield t.id()


def by_module(ids):
    """{module: [test ids]} in first-seen order."""
    out = {}
    for i in ids:
        out.setdefault(i.split(".", 1)[0], []).append(i)
    return out


def test_class(unit):
    mod, cls = unit.split(".")[:2]
    return getattr(import_module(mod), cls)


def by_class(ids):
    """{unit: [test ids]} in first-seen order: a unit is module.Class, or one test id of a RUN_APART class."""
    out = {}
    for i in ids:
        c = i.rsplit(".", 1)[0]
        out.setdefault(i if getattr(test_class(c), "RUN_APART", False) else c, []).append(i)
    return out


def guess_seconds(unit, ids):
    """How long a unit will take, for the order only: its class's RUN_SECONDS (shared by its tests when they run
    apart), else two seconds a test."""
    cls = test_class(unit)
    if not hasattr(cls, "RUN_SECONDS"):
        return 2 * len(ids)
    n = unittest.TestLoader().loadTestsFromTestCase(cls).countTestCases() if unit.count(".") == 2 else 1
    return cls.RUN_SECONDS / n


SHOWN = 25  # units whose time the summary prints
SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", re.M)


# The ports the workers' tests take theirs from, one range each (harness.py, "Ports"); the mutation gate's copies
# take theirs from the band above.
PORTS_LO, PORTS_HI = 12000, 21999


def run_unit(name, ids, whole, ports):
    """Runs one unit's selected tests (a module's or a class's) in a child process whose tests take their ports
    from ports; returns (name, seconds, passed, failed, skipped, output). A child that dies without its summary
    line counts as one failure."""
    sel = [name + ".py" if "." not in name else name] if whole else ids
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, os.path.abspath(__file__)] + sel, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, errors="replace",
                       env=dict(os.environ, OTPD_TEST_PORTS=ports))
    took = time.monotonic() - t0
    m = SUMMARY.search(p.stdout)
    if not m:
        return name, took, 0, 1, 0, p.stdout + "\nrun.py: %s ended (rc %d) without a summary\n" % (name, p.returncode)
    passed, failed, skipped = (int(x) for x in m.groups())
    if p.returncode != 0 and failed == 0:
        failed = 1
    return name, took, passed, failed, skipped, p.stdout


def run_parallel(suite, jobs):
    """Runs the suite's classes in jobs workers, then the SERIAL tests alone; prints each unit's output as it
    ends and the totals. Returns the exit code."""
    ids = list(dict.fromkeys(test_ids(suite)))  # overlapping selectors name a test once
    loader = unittest.TestLoader()
    # A class's SERIAL, else its module's: the serial tests of a module run together, in one child.
    measuring = {i for i in ids if getattr(test_class(i), "SERIAL", getattr(import_module(i.split(".")[0]),
                                                                            "SERIAL", False))}
    alone = by_module(i for i in ids if i in measuring)
    serial = list(alone)
    whole = {m: len(alone[m]) == loader.loadTestsFromModule(import_module(m)).countTestCases() for m in serial}
    classes = by_class(i for i in ids if i not in measuring)
    for c, cids in classes.items():
        whole[c] = c.count(".") == 2 or len(cids) == loader.loadTestsFromTestCase(test_class(c)).countTestCases()
    # The longest classes first, so the last worker to finish is not the one that started a long class late.
    parallel = sorted(classes, key=lambda c: -guess_seconds(c, classes[c]))
    units = dict(classes, **alone)
    results, lock = [], threading.Lock()

    def report(r):
        with lock:
            results.append(r)
            print(r[5], end="" if r[5].endswith("\n") else "\n")
            print("run.py: %s: %.1fs, %d passed, %d failed, %d skipped" % (r[0], r[1], r[2], r[3], r[4]))
            sys.stdout.flush()

    work = queue.Queue()
    for c in parallel:
        work.put(c)

    ranges = harness.port_ranges(jobs, PORTS_LO, PORTS_HI)

    def worker(ports):
        while True:
            try:
                u = work.get_nowait()
            except queue.Empty:
                return
            report(run_unit(u, units[u], whole[u], ports))

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(ranges[i],)) for i in range(min(jobs, len(parallel)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t1 = time.monotonic()
    for m in serial:
        report(run_unit(m, alone[m], whole[m], ranges[0]))
    t2 = time.monotonic()
    passed = sum(r[2] for r in results)
    failed = sum(r[3] for r in results)
    skipped = sum(r[4] for r in results)
    shown = sorted(results, key=lambda r: -r[1])
    print("the %d slowest of %d units (classes; a module's serial tests as one):"
          % (min(SHOWN, len(shown)), len(shown)))
    for r in shown[:SHOWN]:
        print("  %7.1fs  %s%s" % (r[1], r[0], "  (serial)" if r[0] in serial else ""))
    for r in shown:
        if r[3]:
            print("  FAILED   %s" % r[0])
    print("integration: %.1fs (%d workers %.1fs, serial %.1fs)" % (t2 - t0, jobs, t1 - t0, t2 - t1))
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    if passed + failed == 0:
        print("no integration test ran")
        return 1
    return 0 if failed == 0 else 1


def main(argv):
    list_only = "--list" in argv
    failfast = "--failfast" in argv
    jobs = 1
    if "--jobs" in argv:
        i = argv.index("--jobs")
        try:
            jobs = int(argv[i + 1])
        except (IndexError, ValueError):
            print("run.py: --jobs needs a number", file=sys.stderr)
            return 2
        argv = argv[:i] + argv[i + 2:]
    sels = [a for a in argv if a not in ("--list", "--failfast")]
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    try:
        if not sels:
            for n in module_names():
                suite.addTests(loader.loadTestsFromModule(import_module(n)))
        for sel in sels:
            part = resolve(loader, sel)
            if part.countTestCases() == 0:
                raise SelectorError("%r selects no test" % sel)
            suite.addTests(part)
    except SelectorError as e:
        print("run.py: bad selector: %s" % e, file=sys.stderr)
        return 2
    if suite.countTestCases() == 0:
        print("run.py: no integration test selected", file=sys.stderr)
        return 2
    if list_only:
        ids = list(test_ids(suite))
        for i in ids:
            print(i)
        print("%d tests" % len(ids))
        return 0
    if jobs > 1:
        return run_parallel(suite, jobs)
    t0 = time.monotonic()
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout, failfast=failfast).run(suite)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    passed = result.testsRun - failed - len(result.skipped) - len(result.expectedFailures)
    print("integration: %.1fs" % (time.monotonic() - t0))
    if result.expectedFailures:  # known bugs pinned by @expectedFailure: neither passed nor failed
        print("%d expected failure(s): %s" % (len(result.expectedFailures),
                                               ", ".join(t.id() for t, _ in result.expectedFailures)))
    print("%d passed, %d failed, %d skipped" % (passed, failed, len(result.skipped)))
    if result.testsRun == 0:
        print("no integration test ran")
        return 1
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
