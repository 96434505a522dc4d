"""Mutants of problem.c (the problem+json text without jansson) and of the
request state's small body (http.c)."""

MUTANTS = [
    dict(name="problem-hex-lower",
         file="src/http/problem.c",
         old='static const char hex[] = "0123456789ABCDEF";',
         new='static const char hex[] = "0123456789abcdef";',
         test="unit:test_problem",
         why="jansson writes \\u001F upper-case: a client's control byte must come out the same"),
    dict(name="problem-quote-unescaped",
         file="src/http/problem.c",
         old="""const char *name = c == '"'    ? "\\\\\\""
""",
         new="""const char *name = c == '\\x01' ? "\\\\\\""
""",
         test="unit:test_problem",
         why="a quote in a detail (a client's bytes) would end the JSON string early"),
    dict(name="problem-control-passed",
         file="src/http/problem.c",
         old="else if (c < 0x20) {",
         new="else if (c < 0x1f) {",
         test="unit:test_problem",
         why="0x1f raw in a JSON string is invalid JSON"),
    dict(name="problem-attempts-always",
         file="src/http/problem.c",
         old="    if (p->show_attempts)\n",
         new="    if (1)\n",
         test="unit:test_problem",
         why="attempts_left belongs to invalid_code only (the OpenAPI contract)"),
    dict(name="http-body-move-drops-start",
         file="src/http/http_body.c",
         old="memcpy(big, rq->small, rq->len);",
         new="memcpy(big, rq->small, 0);",
         test="test_http_hostile.BodyPiecesTest",
         why="a body that outgrows the small buffer must keep the bytes it already had"),
]
