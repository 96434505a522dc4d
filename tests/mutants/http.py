"""Mutants for http (src/http/http.c): request parsing and auth, and the
delivery-report entry points. Each a small plausible bug, and the test that
must catch it."""
MUTANTS = [
    dict(name="http-bearer-accepts-longer-key",
         file="src/http/http_route.c",
         old="unsigned char diff = n != m;",
         new="unsigned char diff = n < m;",
         test="test_api.ContractErrorsTest.test_auth",
         why="a presented key that only starts with a configured key is accepted"),
    dict(name="http-content-length-cap-late",
         file="src/http/http_route.c",
         old="if (cl != NULL && strtoll(cl, NULL, 10) > HTTP_BODY_MAX)",
         new="if (cl != NULL && strtoll(cl, NULL, 10) > 2 * HTTP_BODY_MAX)",
         test="test_ops.RawHttpTest",
         why="an oversized Content-Length is not refused up front: otpd waits for a body it will refuse"),
    dict(name="http-content-type-prefix",
         file="src/http/http_body.c",
         old="""strncasecmp(ct, "application/json", n) == 0 && (ct[n] == '\\0' || ct[n] == ';' ||""",
         new="""strncasecmp(ct, "application/json", n) == 0 && (1 || ct[n] == ';' ||""",
         test="test_api.ContractErrorsTest.test_body_limits_and_media_type",
         why="any media type starting with application/json (application/jsonp) is taken as JSON"),
    dict(name="http-unknown-field-prefix",
         file="src/http/http_body.c",
         old="for (f = fields; *f && strcmp(*f, key) != 0; f++)",
         new="for (f = fields; *f && strncmp(*f, key, strlen(*f)) != 0; f++)",
         test="test_api.ContractErrorsTest.test_bad_bodies",
         why="an unknown field whose name starts with a known one (purposes, phone_2) is let through"),
]
