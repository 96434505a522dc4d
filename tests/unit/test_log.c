/*
 * Unit tests of log_format_line, the pure part of the log: the two forms
 * (text and JSON) with their head (time, level, event, request id) and
 * fields, JSON escaping (quotes, control bytes, bytes that are not UTF-8),
 * text quoting (a value never reads as two fields or two lines), messages
 * with control characters (C0, DEL, C1, line separators, bidirectional
 * controls) escaped in either form, so no message forges a line or acts
 * on a terminal, and lines too long for the buffer, which lose fields but
 * stay one parseable line.
 * JSON lines are checked by parsing them with jansson.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "../../src/base/log.h"

/* UNITTEST functions of src/base/log.c (src/base/unittest.h). */
int log_enabled(enum log_level level);
int log_level_parse(const char *s);
int log_format_parse(const char *s);
size_t log_format_line(char *out, size_t cap, enum log_format format, long long wall_ms, enum log_level level,
                       const char *event, const char *request_id, const struct log_field *fields, size_t n,
                       const char *msg);

/* 2024-05-01T12:00:00.123Z */
#define T_MS 1714564800123LL

static json_t *parse_line(const char *line, size_t len)
{
    json_error_t e;
    json_t *j;

    assert_true(len > 0 && line[len - 1] == '\n');
    assert_null(memchr(line, '\n', len - 1)); /* one line */
    j = json_loadb(line, len, 0, &e);
    if (j == NULL)
        fail_msg("not JSON (%s): %s", e.text, line);
    assert_true(json_is_object(j));
    return j;
}

static const char *str_of(json_t *j, const char *key)
{
    json_t *v = json_object_get(j, key);

    if (!json_is_string(v))
        fail_msg("%s is not a string", key);
    return json_string_value(v);
}

static void test_json_head_and_fields(void **state)
{
    char line[1024];
    struct log_field f[] = {LOG_STR("rule", "phone_10m"), LOG_INT("status", 429), LOG_STR("empty", ""),
                            LOG_STR("absent", NULL)};
    size_t n = log_format_line(line, sizeof(line), LOG_JSON, T_MS, LOG_WARN, "issue.refused", "rid-1", f, 4,
                               "POST /v1/otp 429");
    json_t *j = parse_line(line, n);

    (void)state;
    assert_string_equal(str_of(j, "time"), "2024-05-01T12:00:00.123Z");
    assert_string_equal(str_of(j, "level"), "warn");
    assert_string_equal(str_of(j, "event"), "issue.refused");
    assert_string_equal(str_of(j, "msg"), "POST /v1/otp 429");
    assert_string_equal(str_of(j, "request_id"), "rid-1");
    assert_string_equal(str_of(j, "rule"), "phone_10m");
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 429);
    assert_null(json_object_get(j, "empty"));
    assert_null(json_object_get(j, "absent"));
    assert_null(json_object_get(j, "truncated"));
    /* The head comes first, in this order. */
    assert_int_equal(strncmp(line, "{\"time\":", 8), 0);
    json_decref(j);
}

static void test_json_plain_line_and_no_request(void **state)
{
    char line[512];
    size_t n = log_format_line(line, sizeof(line), LOG_JSON, 0, LOG_INFO, NULL, "", NULL, 0, "stopped");
    json_t *j = parse_line(line, n);

    (void)state;
    assert_string_equal(str_of(j, "event"), "message");
    assert_string_equal(str_of(j, "time"), "1970-01-01T00:00:00.000Z");
    assert_null(json_object_get(j, "request_id"));
    json_decref(j);
}

static void test_json_escapes(void **state)
{
    /* Quotes, a backslash, a newline, a tab, DEL, an escape byte, a lone
     * continuation byte, a cut 3-byte character, an overlong '/', a
     * surrogate, and valid UTF-8 (é, €, 😀) kept as it is. */
    static const char msg[] = "a\"b\\c\nd\te\x7f\x1b[31m \x80 \xe2\x82 \xc0\xaf \xed\xa0\x80 \xc3\xa9\xe2\x82\xac"
                              "\xf0\x9f\x98\x80";
    char line[1024];
    struct log_field f[] = {LOG_STR("path", "/v1/\"otp\"\r\n{\"injected\":1}")};
    size_t n = log_format_line(line, sizeof(line), LOG_JSON, T_MS, LOG_ERROR, "x.y", "r\"id", f, 1, msg);
    json_t *j = parse_line(line, n);

    (void)state;
    assert_string_equal(str_of(j, "msg"), "a\"b\\c\nd\te\x7f\x1b[31m \xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd "
                                          "\xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd "
                                          "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    assert_string_equal(str_of(j, "path"), "/v1/\"otp\"\r\n{\"injected\":1}");
    assert_string_equal(str_of(j, "request_id"), "r\"id");
    assert_null(json_object_get(j, "injected"));
    json_decref(j);
}

static void test_text_form(void **state)
{
    char line[1024];
    struct log_field f[] = {LOG_STR("rule", "phone_10m"), LOG_INT("status", -3), LOG_STR("reason", "HTTP 401: no"),
                            LOG_STR("q", "a\"b\\c=d\ne\x01\xff"), LOG_STR("none", "")};
    size_t n = log_format_line(line, sizeof(line), LOG_TEXT, T_MS, LOG_INFO, "provider.failed", "rid-2", f, 5,
                               "provider refused");

    (void)state;
    assert_int_equal(n, strlen(line));
    assert_string_equal(line, "2024-05-01T12:00:00.123Z info provider refused event=provider.failed "
                              "request_id=rid-2 rule=phone_10m status=-3 reason=\"HTTP 401: no\" "
                              "q=\"a\\\"b\\\\c=d\\x0ae\\x01\\xff\"\n");
    /* A plain line: today's form, no event, no request id. */
    n = log_format_line(line, sizeof(line), LOG_TEXT, T_MS, LOG_ERROR, NULL, NULL, NULL, 0, "stopped");
    assert_string_equal(line, "2024-05-01T12:00:00.123Z error stopped\n");
    assert_int_equal(n, strlen(line));
}

/* A path with a decoded %0a that carries a whole forged line, and every
 * other character that must not reach a line raw. */
static const char forged[] = "GET /v1/otp/x\n2024-05-01T12:00:00.000Z info admin.block_removed id=1\r\x1b[2K"
                             "\x7f \xc2\x85 \xc2\x9b \xe2\x80\xa8 \xe2\x80\xae \xff \xc3\xa9 404";

static void test_text_message_escapes_controls(void **state)
{
    char line[1024];
    size_t n = log_format_line(line, sizeof(line), LOG_TEXT, T_MS, LOG_INFO, "http.request", "rid", NULL, 0, forged);

    (void)state;
    assert_int_equal(n, strlen(line));
    assert_string_equal(line, "2024-05-01T12:00:00.123Z info GET /v1/otp/x\\x0a2024-05-01T12:00:00.000Z info "
                              "admin.block_removed id=1\\x0d\\x1b[2K\\x7f \\xc2\\x85 \\xc2\\x9b "
                              "\\xe2\\x80\\xa8 \\xe2\\x80\\xae \\xff \xc3\xa9 404 event=http.request "
                              "request_id=rid\n");
}

static void test_json_message_escapes_controls(void **state)
{
    char line[1024];
    struct log_field f[] = {LOG_STR("path", forged)};
    size_t n = log_format_line(line, sizeof(line), LOG_JSON, T_MS, LOG_INFO, "http.request", "rid", f, 1, forged);
    json_t *j = parse_line(line, n);
    size_t i;

    (void)state;
    /* No control byte and no C1, separator or bidirectional control as
     * UTF-8 in the line itself: each is a \u escape. */
    for (i = 0; i + 1 < n; i++) {
        unsigned char c = (unsigned char)line[i], d = (unsigned char)line[i + 1];
        assert_true(c >= 0x20 && c != 0x7f);
        assert_false(c == 0xc2 && d >= 0x80 && d < 0xa0);
        assert_false(c == 0xe2 && d == 0x80 && i + 2 < n && (unsigned char)line[i + 2] >= 0xa8 &&
                     (unsigned char)line[i + 2] <= 0xae);
    }
    assert_non_null(strstr(line, "\\u0085 \\u009b \\u2028 \\u202e \\ufffd \xc3\xa9 404"));
    /* The text is intact once parsed, but for the byte that is not UTF-8. */
    assert_string_equal(str_of(j, "path"), "GET /v1/otp/x\n2024-05-01T12:00:00.000Z info admin.block_removed id=1"
                                           "\r\x1b[2K\x7f \xc2\x85 \xc2\x9b \xe2\x80\xa8 \xe2\x80\xae "
                                           "\xef\xbf\xbd \xc3\xa9 404");
    assert_string_equal(str_of(j, "msg"), str_of(j, "path"));
    json_decref(j);
}

/* A message of control bytes, each escaped four or six times its size,
 * takes half the room left at most: the fields after it stay. */
static void test_escaped_message_leaves_room(void **state)
{
    char line[LOG_LINE_MIN + 64], msg[200];
    struct log_field f[] = {LOG_INT("status", 404)};
    size_t n;
    json_t *j;

    (void)state;
    memset(msg, '\n', sizeof(msg) - 1);
    msg[sizeof(msg) - 1] = '\0';
    n = log_format_line(line, sizeof(line), LOG_TEXT, T_MS, LOG_INFO, NULL, NULL, f, 1, msg);
    assert_string_equal(line + n - strlen(" status=404\n"), " status=404\n");
    n = log_format_line(line, sizeof(line), LOG_JSON, T_MS, LOG_INFO, NULL, NULL, f, 1, msg);
    j = parse_line(line, n);
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 404);
    json_decref(j);
}

/* Many fields into a small buffer: the last ones are dropped whole and the
 * line says so, in either form, and never overruns. */
static void test_truncation(void **state)
{
    char line[LOG_LINE_MIN + 64], big[300];
    struct log_field f[12];
    size_t i, n;
    json_t *j;

    (void)state;
    memset(big, '"', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    for (i = 0; i < 12; i++)
        f[i] = LOG_INT("field", (long long)i);
    f[3] = LOG_STR("big", big);
    memset(line, 'Z', sizeof(line));
    n = log_format_line(line, LOG_LINE_MIN, LOG_JSON, T_MS, LOG_INFO, "e", "rid", f, 12, big);
    assert_true(n < LOG_LINE_MIN);
    assert_int_equal(line[LOG_LINE_MIN], 'Z');
    j = parse_line(line, n);
    assert_true(json_is_true(json_object_get(j, "truncated")));
    assert_null(json_object_get(j, "big")); /* a value is whole or absent */
    assert_true(strlen(str_of(j, "msg")) > 0);
    json_decref(j);

    n = log_format_line(line, LOG_LINE_MIN, LOG_TEXT, T_MS, LOG_INFO, "e", "rid", f, 12, big);
    assert_true(n < LOG_LINE_MIN);
    assert_int_equal(line[LOG_LINE_MIN], 'Z');
    assert_string_equal(line + n - strlen(" truncated=true\n"), " truncated=true\n");

    /* Below the minimum: nothing, and nothing past the buffer. */
    memset(line, 'Z', sizeof(line));
    assert_int_equal(log_format_line(line, 16, LOG_JSON, T_MS, LOG_INFO, "e", "rid", f, 12, big), 0);
    assert_int_equal(line[0], '\0');
    assert_int_equal(line[1], 'Z');
}

static void test_parse_names(void **state)
{
    (void)state;
    assert_int_equal(log_level_parse("debug"), LOG_DEBUG);
    assert_int_equal(log_level_parse("error"), LOG_ERROR);
    assert_int_equal(log_level_parse("verbose"), -1);
    assert_int_equal(log_format_parse("json"), LOG_JSON);
    assert_int_equal(log_format_parse("JSON"), -1);
    assert_string_equal(log_level_name(LOG_WARN), "warn");
}

static void test_level_filter(void **state)
{
    (void)state;
    log_set_level(LOG_WARN);
    assert_false(log_enabled(LOG_INFO));
    assert_true(log_enabled(LOG_WARN));
    assert_true(log_enabled(LOG_ERROR));
    log_set_level(LOG_DEBUG);
    assert_true(log_enabled(LOG_DEBUG));
    log_set_level(LOG_INFO);
    assert_false(log_enabled(LOG_DEBUG));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_head_and_fields), cmocka_unit_test(test_json_plain_line_and_no_request),
        cmocka_unit_test(test_json_escapes),         cmocka_unit_test(test_text_form),
        cmocka_unit_test(test_truncation),           cmocka_unit_test(test_parse_names),
        cmocka_unit_test(test_level_filter),         cmocka_unit_test(test_text_message_escapes_controls),
        cmocka_unit_test(test_json_message_escapes_controls), cmocka_unit_test(test_escaped_message_leaves_room),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
