"""The Lua scripts of src/limits as otpd runs them, for the tests that EVAL them directly: issue.lua and verify.lua
start with prelude.lua, what both share (the Makefile's rule for src/limits/%.lua.h puts the prelude's lines and the
script's in one string); the other scripts are their file alone."""
import hashlib
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIMITS = os.path.join(ROOT, "src", "limits")
PRELUDED = ("issue.lua", "verify.lua")


def limits_script(name):
    """The text otpd loads for src/limits/<name>."""
    parts = (["prelude.lua"] if name in PRELUDED else []) + [name]
    text = ""
    for p in parts:
        with open(os.path.join(LIMITS, p)) as f:
            text += f.read()
    return text


def limits_script_sha(name):
    """The SHA1 otpd's EVALSHA names src/limits/<name> by."""
    return hashlib.sha1(limits_script(name).encode()).hexdigest()
