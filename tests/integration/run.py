"""Runs every tests/integration/test_*.py and prints 'N passed, N failed'.

Usage: python3 tests/integration/run.py [pattern ...]
A pattern selects test modules by substring (e.g. 'limits').
"""
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main():
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    pats = sys.argv[1:]
    for name in sorted(os.listdir(HERE)):
        if name.startswith("test_") and name.endswith(".py") and (not pats or any(p in name for p in pats)):
            suite.addTests(loader.loadTestsFromName(name[:-3]))
    t0 = time.monotonic()
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    failed = len(result.failures) + len(result.errors)
    passed = result.testsRun - failed - len(result.skipped)
    print("integration: %.1fs" % (time.monotonic() - t0))
    print("%d passed, %d failed, %d skipped" % (passed, failed, len(result.skipped)))
    if result.testsRun == 0:
        print("no integration test ran")
        return 1
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
