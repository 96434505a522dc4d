"""Runs the integration tests and prints 'N passed, N failed, N skipped'.

Usage: python3 tests/integration/run.py [--list] [SELECTOR ...]

With no selector every tests/integration/test_*.py runs. A selector is either
  - a substring of a module's file name ('limits' runs test_limits.py and any other match), or
  - a dotted name: 'test_limits.FailClosedTest' or 'test_limits.FailClosedTest.test_x' (exact names).
A selector that selects nothing is an error (exit 2): a typo must never pass as "0 tests ran".
--list prints the selected test ids and their count without running them.

Exit codes: 0 all selected tests passed, 1 a test failed or errored, 2 a bad selector.
"""
import importlib
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


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


def main(argv):
    list_only = "--list" in argv
    sels = [a for a in argv if a != "--list"]
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
    t0 = time.monotonic()
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
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
