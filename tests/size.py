"""`make size`: the longest files and functions of src/ and cmd/, against the house's bounds (a file past 700 lines
has more than one job; a function past 80 lines, except a table's initialiser, does too). A warning, never a gate:
it prints what is over and exits 0. --strict exits 1 when something is over (for a reviewer who wants it).

A function is what .clang-format makes of one: a line at column 0 that opens a definition, a "{" alone at column 0,
and its end, a "}" alone at column 0. Generated headers (*.lua.h, schema.h) are not counted.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILE_MAX = 700
FUNC_MAX = 80
SOURCES = (".c", ".cc", ".h", ".lua")
# A table's initialiser is data, one row a line: "static const struct x rows[] = {" at column 0.
TABLE = re.compile(r"^[A-Za-z].*=\s*\{\s*$")
NAME = re.compile(r"\b(?!__attribute__\b)([A-Za-z_]\w*)\s*\(")


def tracked():
    out = subprocess.run(["git", "ls-files", "src", "cmd"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    return [f for f in out if f.endswith(SOURCES) and not f.endswith((".lua.h", "schema.h"))]


def functions(path, lines):
    """(length, path:line, name) of each C function definition in lines."""
    out, i = [], 0
    while i < len(lines) - 1:
        head = lines[i]
        if head.rstrip().endswith(")") and lines[i + 1].rstrip() == "{" and not TABLE.match(head):
            # The name is on the first line of the signature: look back over a wrapped parameter list.
            k = i
            while k > 0 and not lines[k][:1].isalpha() and lines[k - 1].rstrip() and \
                    not lines[k - 1].rstrip().endswith((";", "}", "*/")):
                k -= 1
            if not lines[k][:1].isalpha():
                i += 1
                continue  # not a definition at file scope
            m = NAME.search(lines[k]) or NAME.search(head)
            j = i + 1
            while j < len(lines) and lines[j].rstrip() != "}":
                j += 1
            out.append((j - k + 1, "%s:%d" % (path, k + 1), m.group(1) if m else "?"))
            i = j
        i += 1
    return out


def main(argv):
    strict = "--strict" in argv
    files, funcs = [], []
    for f in tracked():
        with open(os.path.join(ROOT, f), encoding="utf-8", errors="replace") as fh:
            lines = fh.read().split("\n")
        n = len(lines) - (1 if lines and lines[-1] == "" else 0)
        files.append((n, f))
        if f.endswith((".c", ".cc")):
            funcs.extend(functions(f, lines))
    files.sort(reverse=True)
    funcs.sort(reverse=True)
    over_files = [x for x in files if x[0] > FILE_MAX]
    over_funcs = [x for x in funcs if x[0] > FUNC_MAX]
    print("longest files (bound %d lines):" % FILE_MAX)
    for n, f in files[:12]:
        print("  %5d  %s%s" % (n, f, "  OVER" if n > FILE_MAX else ""))
    print("longest functions (bound %d lines):" % FUNC_MAX)
    for n, where, name in funcs[:12]:
        print("  %5d  %s  %s%s" % (n, name, where, "  OVER" if n > FUNC_MAX else ""))
    print("files over 600: %d, over %d: %d; functions over 60: %d, over %d: %d, over 100: %d" % (
        len([x for x in files if x[0] > 600]), FILE_MAX, len(over_files), len([x for x in funcs if x[0] > 60]),
        FUNC_MAX, len(over_funcs), len([x for x in funcs if x[0] > 100])))
    if over_files or over_funcs:
        print("size: warning: %d file(s) and %d function(s) over the bounds" % (len(over_files), len(over_funcs)))
        return 1 if strict else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
