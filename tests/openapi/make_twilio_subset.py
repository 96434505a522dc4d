#!/usr/bin/env python3
"""Makes tests/openapi/twilio_verify_v2.otpd.json, otpd's copy of Twilio's
Verify v2 OpenAPI document, from Twilio's own file: only the operations
otpd's /v2 serves (OPERATIONS), the schemas and tags they use, and one fix
for Stoplight Prism (below). tests/integration/test_v2_openapi.py drives
otpd's /v2 through `prism proxy` on that copy.

Twilio's file (not kept here: 0.5 MB) is twilio/twilio-oai
spec/json/twilio_verify_v2.json at the commit SOURCE names; its git blob
hash is checked, so the copy is the same on every run:

    curl -fsSLo /tmp/twilio_verify_v2.json \\
      https://raw.githubusercontent.com/twilio/twilio-oai/d50069b44ea8cd23141385bdb6db48f16ff75bb5/spec/json/twilio_verify_v2.json
    python3 tests/openapi/make_twilio_subset.py /tmp/twilio_verify_v2.json          # writes the copy
    python3 tests/openapi/make_twilio_subset.py --check /tmp/twilio_verify_v2.json  # exit 1 if it differs

Adding an operation otpd starts serving is one line of OPERATIONS and a
run (the run stops when the new part of Twilio's file brings another
untyped nullable: see below).

The fix: Prism 5.14.2 (tests/openapi/package.json) cannot compile a
response schema holding a property with `nullable: true` and no `type`;
it then skips validating that response altogether, without a word. In
Twilio's file those are verify.v2.service's push, totp, whatsapp and
passkeys and verify.v2.service.verification's lookup and sna, so no answer
of the service and verification operations would be checked (the rate
limit and bucket schemas, verify.v2.service.rate_limit and
verify.v2.service.rate_limit.bucket, type every property: a rate limit's
links is `"type": "object", "nullable": true`, which Prism compiles). Each is a
JSON object or null in Twilio's examples: the copy adds `"type": "object"`
next to each such `nullable: true` (FIXED_NULLABLE lists them; the run
fails when Twilio's file has others among the kept schemas, so a new one
is looked at, not guessed). The copy's info.description says the same.
"""
import argparse
import copy
import hashlib
import json
import os
import sys

SOURCE = {
    "repository": "twilio/twilio-oai",
    "commit": "d50069b44ea8cd23141385bdb6db48f16ff75bb5",
    "path": "spec/json/twilio_verify_v2.json",
    "blob": "77562af5763e7618676bff011188ccbeb6472433",  # git hash-object of the file
}

# The operations otpd's /v2 serves, by Twilio's operationId.
OPERATIONS = (
    "CreateService",
    "ListService",
    "FetchService",
    "UpdateService",
    "DeleteService",
    "CreateVerification",
    "FetchVerification",
    "UpdateVerification",
    "CreateVerificationCheck",
    "CreateRateLimit",
    "ListRateLimit",
    "FetchRateLimit",
    "UpdateRateLimit",
    "DeleteRateLimit",
    "CreateBucket",
    "ListBucket",
    "FetchBucket",
    "UpdateBucket",
    "DeleteBucket",
)

# JSON pointers (into the copy) of the untyped nullable properties that get
# "type": "object" (see the docstring).
FIXED_NULLABLE = (
    "/components/schemas/verify.v2.service/properties/push",
    "/components/schemas/verify.v2.service/properties/totp",
    "/components/schemas/verify.v2.service/properties/whatsapp",
    "/components/schemas/verify.v2.service/properties/passkeys",
    "/components/schemas/verify.v2.service.verification/properties/lookup",
    "/components/schemas/verify.v2.service.verification/properties/sna",
)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "twilio_verify_v2.otpd.json")
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
SCHEMA_REF = "#/components/schemas/"


def git_blob(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def pointer(parts):
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def refs_in(node, out):
    """Adds the schema names node's $refs name to out."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            if not ref.startswith(SCHEMA_REF):
                raise SystemExit("unexpected $ref %r: only %s... are copied" % (ref, SCHEMA_REF))
            out.add(ref[len(SCHEMA_REF):])
        for v in node.values():
            refs_in(v, out)
    elif isinstance(node, list):
        for v in node:
            refs_in(v, out)


def untyped_nullables(doc):
    """JSON pointers of every object in doc with `nullable: true` and no
    `type` (what Prism 5.14.2 cannot compile), in document order."""
    found = []

    def walk(node, where):
        if isinstance(node, dict):
            if node.get("nullable") is True and "type" not in node and "$ref" not in node:
                found.append(pointer(where))
            for k, v in node.items():
                walk(v, where + [k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, where + [i])

    walk(doc, [])
    return found


def resolve(doc, ptr):
    node = doc
    for part in ptr.lstrip("/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def subset(twilio):
    """Twilio's document reduced to OPERATIONS, with the fix."""
    out = {k: copy.deepcopy(v) for k, v in twilio.items() if k not in ("paths", "components", "tags")}
    out["paths"] = {}
    found = {}
    for path, item in twilio["paths"].items():
        kept = {m: op for m, op in item.items() if m in METHODS and op.get("operationId") in OPERATIONS}
        if not kept:
            continue
        for m, op in kept.items():
            if op["operationId"] in found:
                raise SystemExit("operationId %s appears twice" % op["operationId"])
            found[op["operationId"]] = (m, path)
        # Path-level fields (servers, parameters, description, x-twilio) as they are.
        out["paths"][path] = {k: copy.deepcopy(v) for k, v in item.items() if k not in METHODS or k in kept}
    missing = [o for o in OPERATIONS if o not in found]
    if missing:
        raise SystemExit("not in Twilio's document: %s" % ", ".join(missing))

    names = set()
    refs_in(out["paths"], names)
    schemas = twilio["components"]["schemas"]
    todo = list(names)
    while todo:
        more = set()
        refs_in(schemas[todo.pop()], more)
        todo.extend(sorted(more - names))
        names |= more
    components = {k: copy.deepcopy(v) for k, v in twilio["components"].items() if k != "schemas"}
    components["schemas"] = {k: copy.deepcopy(v) for k, v in schemas.items() if k in names}
    out["components"] = components
    used_tags = {t for item in out["paths"].values() for m, op in item.items() if m in METHODS
                 for t in op.get("tags", [])}
    if "tags" in twilio:
        out["tags"] = [copy.deepcopy(t) for t in twilio["tags"] if t["name"] in used_tags]

    # The fix, exactly where expected.
    untyped = untyped_nullables(out)
    if sorted(untyped) != sorted(FIXED_NULLABLE):
        raise SystemExit("untyped nullable properties in the kept part of Twilio's document: %s\nexpected: %s\n"
                         "look at each (what Twilio's examples hold there) and update FIXED_NULLABLE"
                         % (untyped, list(FIXED_NULLABLE)))
    for ptr in FIXED_NULLABLE:
        resolve(out, ptr)["type"] = "object"
    assert untyped_nullables(out) == []

    src = "%s %s at commit %s (git blob %s)" % (SOURCE["repository"], SOURCE["path"], SOURCE["commit"],
                                                SOURCE["blob"])
    out["info"]["description"] = (
        "%s\n\notpd's copy, made by tests/openapi/make_twilio_subset.py from %s: only the operations otpd's /v2 "
        "serves (%s) with the schemas and tags they use. One change: \"type\": \"object\" is added next to "
        "\"nullable\": true where Twilio's document has no type (%s), because Stoplight Prism 5.14.2 cannot "
        "compile such a schema and then silently skips validating the whole response; each is a JSON object or "
        "null in Twilio's examples. Everything else is Twilio's text unchanged."
        % (out["info"].get("description", ""), src, ", ".join(OPERATIONS), ", ".join(FIXED_NULLABLE)))
    return out


def render(doc):
    return json.dumps(doc, indent=1, ensure_ascii=True) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("twilio_json", help="Twilio's twilio_verify_v2.json at commit " + SOURCE["commit"])
    ap.add_argument("--out", default=OUT, help="where to write the copy (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when --out differs from a new run")
    args = ap.parse_args()
    with open(args.twilio_json, "rb") as f:
        data = f.read()
    if git_blob(data) != SOURCE["blob"]:
        raise SystemExit("%s is not %s at %s: its git blob hash is %s, not %s" % (
            args.twilio_json, SOURCE["path"], SOURCE["commit"], git_blob(data), SOURCE["blob"]))
    text = render(subset(json.loads(data)))
    if args.check:
        try:
            with open(args.out) as f:
                same = f.read() == text
        except FileNotFoundError:
            same = False
        print("%s: %s" % (args.out, "up to date" if same else "differs from a new run"))
        return 0 if same else 1
    with open(args.out, "w") as f:
        f.write(text)
    print("%s: %d operations, %d schemas, %d bytes" % (
        args.out, len(OPERATIONS), len(json.loads(text)["components"]["schemas"]), len(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
