"""Arrows point down: no file in src/ includes a module of its own layer or of a layer above it.

Usage: python3 tests/layers.py   (part of `make lint`; exit 1 and one line per include that runs up or sideways)

The layers, bottom first (docs/architecture.md, "Layers"): base; store, ledger, provider; limits, pacer, admin;
otp; v2; http. cmd/ sits on top and may include anything. A module's own files include each other freely.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYER = {"base": 0, "store": 1, "ledger": 1, "provider": 1, "limits": 2, "pacer": 2, "admin": 2, "otp": 3, "v2": 4,
         "http": 5}
INCLUDE = re.compile(r'^\s*#\s*include\s+"\.\./(\w+)/')


def main():
    bad = []
    src = os.path.join(ROOT, "src")
    for module in sorted(os.listdir(src)):
        d = os.path.join(src, module)
        if not os.path.isdir(d):
            continue
        if module not in LAYER:
            bad.append("src/%s: a module with no layer (add it to tests/layers.py and docs/architecture.md)" % module)
            continue
        for name in sorted(os.listdir(d)):
            if not name.endswith((".c", ".h", ".cc")):
                continue
            with open(os.path.join(d, name), encoding="utf-8") as fh:
                for n, line in enumerate(fh, 1):
                    m = INCLUDE.match(line)
                    if not m or m.group(1) == module:
                        continue
                    to = m.group(1)
                    if LAYER.get(to, 99) >= LAYER[module]:
                        bad.append("src/%s/%s:%d: %s (layer %d) includes %s (layer %s)"
                                   % (module, name, n, module, LAYER[module], to, LAYER.get(to, "unknown")))
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
