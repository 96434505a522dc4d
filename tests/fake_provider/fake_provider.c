/*
 * fake_provider.c - fake SMS provider for otpd integration tests.
 *
 * A real HTTP server (libmicrohttpd, one thread per connection) that stands
 * in for Kannel, Twilio and a generic JSON webhook. Tests can inject latency
 * and failures at runtime and read back every provider request with the
 * time it arrived.
 *
 * Usage: fake_provider --port N [--bind ADDR] [--log FILE]
 *   --port N     TCP port; 0 picks a free one. Required.
 *   --bind ADDR  IPv4 address to listen on (default 127.0.0.1).
 *   --log FILE   also append each recorded request to FILE as one JSON line.
 * Prints "ready <port>" on stdout once listening. Exits 0 on SIGTERM/SIGINT.
 *
 * Provider routes (recorded, affected by injection):
 *   GET|POST /cgi-bin/sendsms                      Kannel  -> 202 "0: Accepted for delivery"
 *   POST /2010-04-01/Accounts/{sid}/Messages.json  Twilio  -> 201 {"sid":"SM<32 hex>","status":"queued"}
 *   POST anything else (not /_...)                 webhook -> 200 {"id":"fp-<seq>"}
 *   Any other method/path is recorded and answered 404 (no injection).
 *   Bodies over 64 KiB are answered 413 (no injection; first 64 KiB recorded).
 *
 * Control routes (not recorded, not affected by injection):
 *   POST /_control   JSON object, any subset of
 *                    latency_ms  int 0..600000  sleep before answering
 *                    status      int 0|200..599 forced status (0 = normal)
 *                    statuses    [int,...]      queue, one per request, replaces
 *                                               the previous queue (0 = normal)
 *                    hang        bool           never answer (status 0 recorded,
 *                                               no queue entry consumed)
 *                    retry_after int >= 0|null  Retry-After on 429/503 answers
 *                    rules       [rule,...]     per-destination answers (at
 *                                               most 16), replace the previous
 *                                               rules; [] clears them
 *                    -> 200 {"ok":true}; unknown field / bad value -> 400.
 *   GET  /_control   current injection settings (statuses = what is left;
 *                    rules as objects with to_prefix, status (or null),
 *                    body (or null), hang).
 *   POST /_reset     clear the record, reset seq to 1 and all injection
 *                    (rules included).
 *   GET  /_requests  JSON array of records, in seq order.
 * A forced 2xx status gets the route's normal success body; any other forced
 * status gets a text/plain body "injected <status>".
 *
 * A rule is an object
 *   {"to_prefix": "+44", "status": 403, "body": "...", "hang": false}
 *     to_prefix  string, 1..16 bytes, required
 *     status     int 200..599; required unless hang is true
 *     body       string of at most 1024 bytes, or null (optional)
 *     hang       bool (optional, default false)
 * For a provider request, the destination is Kannel's "to" query argument
 * (or "to" form field of a form POST), Twilio's form field "To", or the
 * webhook's JSON body field "to". The first rule whose to_prefix is a
 * byte prefix of the destination decides the answer INSTEAD of the global
 * injection: no latency, no global hang, and no statuses entry is consumed
 * for that request (the global retry_after still adds Retry-After to a
 * rule's 429/503 answer). With "hang": true the request is never answered
 * (status 0 recorded). Otherwise a 2xx status gets the route's normal
 * success body (body ignored); another status gets body verbatim if given,
 * as application/json when it starts with '{' and text/plain otherwise
 * (e.g. Kannel's 403 "Not routable. Do not try again."), else the usual
 * text/plain "injected <status>". Requests no rule matches (or with no
 * destination) are handled by the global settings exactly as before.
 *
 * Record fields: seq (1,2,... in the order bodies were fully received, which
 * is the order the statuses queue is consumed in), t_us (CLOCK_REALTIME
 * microseconds at the first access-handler call, i.e. headers received),
 * provider ("kannel"|"twilio"|"webhook"|"none"), method, path (as decoded by
 * MHD), query (raw query string as sent, "" if none), args (decoded query
 * arguments, object), headers (object), content_type, authorization (string
 * or null), body (string), body_truncated (bool), form (decoded
 * x-www-form-urlencoded body as an object, or null), status (answered status;
 * 0 = hung, never answered). Strings that are not valid UTF-8 are recorded
 * byte by byte as Latin-1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BODY_CAP (64 * 1024)
#define URI_CAP (16 * 1024)
#define MAX_RECORDS 100000
#define MAX_STATUSES 4096
#define MAX_LATENCY_MS 600000L
#define MAX_RETRY_AFTER 86400L
#define MAX_RULES 16
#define RULE_PREFIX_CAP 16
#define RULE_BODY_CAP 1024
#define CONN_LIMIT 4096u
#define CONN_TIMEOUT_S 120u
#define THREAD_STACK (1024u * 1024u)
#define WAIT_SLICE_US 50000L
#define NOFILE_WANT 65536

enum provider { P_NONE, P_KANNEL, P_TWILIO, P_WEBHOOK };

/* One per-destination rule of /_control "rules". */
struct rule {
	char prefix[RULE_PREFIX_CAP];
	size_t prefix_len;
	int status;   /* 0 = not given (only with hang) */
	bool hang;
	bool has_body;
	char body[RULE_BODY_CAP];
	size_t body_len;
};

/* Injection settings; guarded by g.lock. */
struct injection {
	long latency_ms;
	int status;
	int queue[MAX_STATUSES];
	size_t queue_len;
	size_t queue_pos;
	bool hang;
	long retry_after; /* -1 = no Retry-After header */
	struct rule rules[MAX_RULES];
	size_t n_rules;
};

/* A parsed /_control body: which fields were given and their values. */
struct patch {
	bool has_latency, has_status, has_queue, has_hang, has_retry;
	bool has_rules;
	long latency_ms;
	int status;
	int queue[MAX_STATUSES];
	size_t queue_len;
	bool hang;
	long retry_after;
	struct rule rules[MAX_RULES];
	size_t n_rules;
};

/* What to do with one provider request. */
struct decision {
	int status;
	long latency_ms;
	bool hang;
	long retry_after;
	bool injected;
	bool by_rule;   /* a rule decided the answer */
	bool has_body;  /* the rule's body, copied out under the lock */
	char body[RULE_BODY_CAP];
	size_t body_len;
};

/* Per-request state, created by the URI logger, freed on completion. */
struct request {
	char *raw_uri;
	int64_t t_us;
	bool started;
	char *body;
	size_t body_len;
	size_t body_alloc;
	bool too_big;
	bool oom;
};

static struct {
	pthread_mutex_t lock;
	struct injection inj;
	json_t **records;
	size_t n_records;
	size_t records_alloc;
	bool warned_full;
	int64_t next_seq;
	FILE *log;
} g = { .lock = PTHREAD_MUTEX_INITIALIZER, .next_seq = 1 };

static atomic_bool g_stopping;
static atomic_bool g_started;

/* ---------- small utilities ---------- */

static int64_t now_realtime_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t now_mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Sleep for ms milliseconds in small slices; false if the server stops. */
static bool wait_ms(long ms)
{
	int64_t deadline = now_mono_us() + (int64_t)ms * 1000;
	for (;;) {
		if (atomic_load(&g_stopping))
			return false;
		int64_t left = deadline - now_mono_us();
		if (left <= 0)
			return true;
		if (left > WAIT_SLICE_US)
			left = WAIT_SLICE_US;
		struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)left * 1000 };
		nanosleep(&ts, NULL);
	}
}

/* Block until the client closes the connection or the server stops. */
static void hang_until_gone(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	int fd = ci ? ci->connect_fd : -1;

	while (!atomic_load(&g_stopping)) {
		if (fd < 0) {
			wait_ms(WAIT_SLICE_US / 1000);
			continue;
		}
		struct pollfd p = { .fd = fd, .events = POLLRDHUP };
		int rc = poll(&p, 1, (int)(WAIT_SLICE_US / 1000));
		if (rc > 0 &&
		    (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
			return;
	}
}

/* JSON string from bytes; invalid UTF-8 is re-read as Latin-1. */
static json_t *jstr(const char *s, size_t len)
{
	if (s == NULL)
		return json_null();
	json_t *j = json_stringn(s, len);
	if (j != NULL)
		return j;
	char *buf = malloc(len * 2 + 1);
	if (buf == NULL)
		return json_null();
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch < 0x80) {
			buf[o++] = (char)ch;
		} else {
			buf[o++] = (char)(0xC0 | (ch >> 6));
			buf[o++] = (char)(0x80 | (ch & 0x3F));
		}
	}
	j = json_stringn(buf, o);
	free(buf);
	return j ? j : json_null();
}

static json_t *jstr0(const char *s)
{
	return jstr(s, s ? strnlen(s, BODY_CAP) : 0);
}

static int hex_value(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* Decode '+' and %XX in place; returns the new length. */
static size_t form_unescape(char *s, size_t len)
{
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '+') {
			s[o++] = ' ';
		} else if (s[i] == '%' && i + 2 < len &&
			   hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
			s[o++] = (char)(hex_value(s[i + 1]) * 16 +
					hex_value(s[i + 2]));
			i += 2;
		} else {
			s[o++] = s[i];
		}
	}
	return o;
}

/* Add one "key=value" pair of a urlencoded form to obj. */
static void form_add_pair(json_t *obj, const char *pair, size_t n)
{
	char *copy = malloc(n + 1);
	if (copy == NULL)
		return;
	memcpy(copy, pair, n);
	copy[n] = '\0';
	char *eq = memchr(copy, '=', n);
	size_t klen = eq ? (size_t)(eq - copy) : n;
	char *val = eq ? eq + 1 : copy + n;
	size_t vlen = eq ? n - klen - 1 : 0;

	klen = form_unescape(copy, klen);
	vlen = form_unescape(val, vlen);
	json_object_setn_new(obj, copy, klen, jstr(val, vlen));
	free(copy);
}

static json_t *form_to_json(const char *body, size_t len)
{
	json_t *obj = json_object();
	if (obj == NULL || body == NULL)
		return obj;
	const char *p = body;
	const char *end = body + len;
	while (p < end) {
		const char *amp = memchr(p, '&', (size_t)(end - p));
		if (amp == NULL)
			amp = end;
		if (amp > p)
			form_add_pair(obj, p, (size_t)(amp - p));
		if (amp == end)
			break;
		p = amp + 1;
	}
	return obj;
}

static enum MHD_Result collect_kv(void *cls, enum MHD_ValueKind kind,
				  const char *key, const char *value)
{
	json_t *obj = cls;
	(void)kind;
	if (key != NULL)
		json_object_set_new(obj, key, jstr0(value));
	return MHD_YES;
}

static void random_hex(char *out, size_t nbytes)
{
	unsigned char raw[32];
	if (nbytes > sizeof raw)
		nbytes = sizeof raw;
	if (getrandom(raw, nbytes, 0) != (ssize_t)nbytes) {
		uint64_t x = (uint64_t)now_mono_us() ^ (uint64_t)now_realtime_us();
		for (size_t i = 0; i < nbytes; i++) {
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
			raw[i] = (unsigned char)(x >> 56);
		}
	}
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < nbytes; i++) {
		out[2 * i] = digits[raw[i] >> 4];
		out[2 * i + 1] = digits[raw[i] & 0x0F];
	}
	out[2 * nbytes] = '\0';
}

/* ---------- per-request state ---------- */

static struct request *request_new(const char *uri)
{
	struct request *r = calloc(1, sizeof *r);
	if (r != NULL && uri != NULL)
		r->raw_uri = strndup(uri, URI_CAP);
	return r;
}

static void request_free(struct request *r)
{
	if (r == NULL)
		return;
	free(r->raw_uri);
	free(r->body);
	free(r);
}

/* Append upload data, keeping at most BODY_CAP bytes. */
static void body_append(struct request *r, const char *data, size_t len)
{
	if (r->too_big || r->oom)
		return;
	if (len > BODY_CAP - r->body_len) {
		r->too_big = true;
		len = BODY_CAP - r->body_len;
	}
	if (len == 0)
		return;
	size_t need = r->body_len + len + 1;
	if (need > r->body_alloc) {
		size_t cap = r->body_alloc ? r->body_alloc * 2 : 1024;
		if (cap < need)
			cap = need;
		if (cap > BODY_CAP + 1)
			cap = BODY_CAP + 1;
		char *nb = realloc(r->body, cap);
		if (nb == NULL) {
			r->oom = true;
			return;
		}
		r->body = nb;
		r->body_alloc = cap;
	}
	memcpy(r->body + r->body_len, data, len);
	r->body_len += len;
	r->body[r->body_len] = '\0';
}

static void *uri_logger(void *cls, const char *uri, struct MHD_Connection *c)
{
	(void)cls;
	(void)c;
	return request_new(uri);
}

static void request_completed(void *cls, struct MHD_Connection *c,
			      void **con_cls,
			      enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	(void)c;
	(void)toe;
	request_free(*con_cls);
	*con_cls = NULL;
}

/* ---------- responses ---------- */

/* Queue buf (malloc'd, ownership taken) as the answer. */
static enum MHD_Result send_buf(struct MHD_Connection *c, int status,
				const char *ctype, char *buf, size_t len,
				long retry_after)
{
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
	if (resp == NULL) {
		free(buf);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	if (retry_after >= 0 && (status == 429 || status == 503)) {
		char ra[24];
		snprintf(ra, sizeof ra, "%ld", retry_after);
		MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
	}
	enum MHD_Result ret = MHD_queue_response(c, (unsigned int)status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result send_text(struct MHD_Connection *c, int status,
				 const char *text, long retry_after)
{
	char *copy = strdup(text);
	if (copy == NULL)
		return MHD_NO;
	return send_buf(c, status, "text/plain", copy, strlen(copy),
			retry_after);
}

/* Send j (reference stolen) as compact JSON. */
static enum MHD_Result send_json(struct MHD_Connection *c, int status,
				 json_t *j, long retry_after)
{
	char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
	json_decref(j);
	if (s == NULL)
		return send_text(c, 500, "out of memory\n", -1);
	return send_buf(c, status, "application/json", s, strlen(s),
			retry_after);
}

static enum MHD_Result send_error(struct MHD_Connection *c, int status,
				  const char *msg)
{
	return send_json(c, status,
			 json_pack("{s:b,s:s}", "ok", 0, "error", msg), -1);
}

/* ---------- recording ---------- */

static const char *provider_name(enum provider p)
{
	switch (p) {
	case P_KANNEL:
		return "kannel";
	case P_TWILIO:
		return "twilio";
	case P_WEBHOOK:
		return "webhook";
	default:
		return "none";
	}
}

static bool is_twilio_path(const char *url)
{
	static const char pre[] = "/2010-04-01/Accounts/";
	static const char suf[] = "/Messages.json";
	size_t n = strlen(url);
	size_t pl = sizeof pre - 1;
	size_t sl = sizeof suf - 1;
	if (n <= pl + sl)
		return false;
	if (strncmp(url, pre, pl) != 0 || strcmp(url + n - sl, suf) != 0)
		return false;
	return memchr(url + pl, '/', n - pl - sl) == NULL;
}

static enum provider classify(const char *method, const char *url)
{
	bool get = strcmp(method, "GET") == 0;
	bool post = strcmp(method, "POST") == 0;
	if ((get || post) && strcmp(url, "/cgi-bin/sendsms") == 0)
		return P_KANNEL;
	if (post)
		return is_twilio_path(url) ? P_TWILIO : P_WEBHOOK;
	return P_NONE;
}

/* Build a record for this request; seq and status are filled in later. */
static json_t *build_record(struct MHD_Connection *c, const char *url,
			    const char *method, const struct request *r,
			    enum provider p)
{
	json_t *rec = json_object();
	json_t *args = json_object();
	json_t *headers = json_object();
	if (rec == NULL || args == NULL || headers == NULL) {
		json_decref(rec);
		json_decref(args);
		json_decref(headers);
		return NULL;
	}
	const char *q = r->raw_uri ? strchr(r->raw_uri, '?') : NULL;
	const char *ctype = MHD_lookup_connection_value(
		c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
	const char *auth = MHD_lookup_connection_value(
		c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	bool is_form = ctype != NULL &&
		       strncasecmp(ctype, "application/x-www-form-urlencoded",
				   33) == 0;

	MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, collect_kv, args);
	MHD_get_connection_values(c, MHD_HEADER_KIND, collect_kv, headers);

	json_object_set_new(rec, "seq", json_integer(0));
	json_object_set_new(rec, "t_us", json_integer(r->t_us));
	json_object_set_new(rec, "provider", json_string(provider_name(p)));
	json_object_set_new(rec, "method", jstr0(method));
	json_object_set_new(rec, "path", jstr0(url));
	json_object_set_new(rec, "query", jstr0(q ? q + 1 : ""));
	json_object_set_new(rec, "args", args);
	json_object_set_new(rec, "headers", headers);
	json_object_set_new(rec, "content_type", jstr0(ctype));
	json_object_set_new(rec, "authorization", jstr0(auth));
	json_object_set_new(rec, "body", jstr(r->body ? r->body : "",
					      r->body_len));
	json_object_set_new(rec, "body_truncated", json_boolean(r->too_big));
	json_object_set_new(rec, "form", is_form ? form_to_json(r->body,
							       r->body_len)
						 : json_null());
	json_object_set_new(rec, "status", json_integer(0));
	return rec;
}

/*
 * The destination number of a provider request, for "rules": Kannel's "to"
 * query argument (or form field), Twilio's form field "To", the webhook's
 * JSON body field "to". A malloc'd copy (length in *len), or NULL if none.
 */
static char *destination(const json_t *rec, enum provider p,
			 const struct request *r, size_t *len)
{
	const json_t *v = NULL;
	json_t *doc = NULL;
	const json_t *form = rec ? json_object_get(rec, "form") : NULL;

	if (p == P_KANNEL) {
		v = rec ? json_object_get(json_object_get(rec, "args"), "to")
			: NULL;
		if (!json_is_string(v))
			v = json_object_get(form, "to");
	} else if (p == P_TWILIO) {
		v = json_object_get(form, "To");
	} else if (p == P_WEBHOOK && r->body != NULL) {
		doc = json_loadb(r->body, r->body_len, 0, NULL);
		v = json_object_get(doc, "to");
	}
	char *out = NULL;
	if (json_is_string(v)) {
		*len = json_string_length(v);
		out = malloc(*len + 1);
		if (out != NULL) {
			memcpy(out, json_string_value(v), *len);
			out[*len] = '\0';
		}
	}
	json_decref(doc);
	return out;
}

/* Under g.lock: the first rule whose prefix starts dest, or NULL. */
static const struct rule *match_rule(const char *dest, size_t len)
{
	if (dest == NULL)
		return NULL;
	for (size_t i = 0; i < g.inj.n_rules; i++) {
		const struct rule *ru = &g.inj.rules[i];
		if (ru->prefix_len <= len &&
		    memcmp(ru->prefix, dest, ru->prefix_len) == 0)
			return ru;
	}
	return NULL;
}

/*
 * Under g.lock: pick status/latency/hang for one provider request. A rule
 * matching dest decides instead of the global settings, which are then left
 * untouched (no queue entry consumed, no latency, no global hang).
 */
static void take_injection(struct decision *d, const char *dest,
			   size_t dest_len)
{
	struct injection *inj = &g.inj;
	const struct rule *ru = match_rule(dest, dest_len);
	if (ru != NULL) {
		d->by_rule = true;
		d->latency_ms = 0;
		d->retry_after = inj->retry_after;
		d->hang = ru->hang;
		if (d->hang)
			return;
		d->status = ru->status;
		d->injected = true;
		d->has_body = ru->has_body;
		d->body_len = ru->body_len;
		memcpy(d->body, ru->body, ru->body_len);
		return;
	}
	d->latency_ms = inj->latency_ms;
	d->retry_after = inj->retry_after;
	d->hang = inj->hang;
	if (d->hang)
		return;
	int st = inj->status;
	if (inj->queue_pos < inj->queue_len)
		st = inj->queue[inj->queue_pos++];
	d->status = st;
	d->injected = st != 0;
}

/* Under g.lock: append a finished record and log it. */
static void store_record(json_t *rec)
{
	if (g.log != NULL) {
		char *line = json_dumps(rec, JSON_COMPACT);
		if (line != NULL) {
			fputs(line, g.log);
			fputc('\n', g.log);
			fflush(g.log);
			free(line);
		}
	}
	if (g.n_records >= MAX_RECORDS) {
		if (!g.warned_full)
			fprintf(stderr, "fake_provider: record full (%d), "
					"dropping new records\n",
				MAX_RECORDS);
		g.warned_full = true;
		json_decref(rec);
		return;
	}
	if (g.n_records == g.records_alloc) {
		size_t cap = g.records_alloc ? g.records_alloc * 2 : 64;
		json_t **nr = realloc(g.records, cap * sizeof *nr);
		if (nr == NULL) {
			json_decref(rec);
			return;
		}
		g.records = nr;
		g.records_alloc = cap;
	}
	g.records[g.n_records++] = rec;
}

/*
 * Assign seq, decide the answer (taking injection if allowed), set the
 * record's status and store it. Takes ownership of rec. Returns seq.
 */
static int64_t commit_record(json_t *rec, enum provider p, bool injectable,
			     const char *dest, size_t dest_len,
			     struct decision *d)
{
	pthread_mutex_lock(&g.lock);
	int64_t seq = g.next_seq++;
	if (injectable)
		take_injection(d, dest, dest_len);
	if (!d->hang && d->status == 0)
		d->status = p == P_KANNEL ? 202 : p == P_TWILIO ? 201 : 200;
	if (rec != NULL) {
		json_object_set_new(rec, "seq", json_integer(seq));
		json_object_set_new(rec, "status",
				    json_integer(d->hang ? 0 : d->status));
		store_record(rec);
	}
	pthread_mutex_unlock(&g.lock);
	return seq;
}

static void clear_records_locked(void)
{
	for (size_t i = 0; i < g.n_records; i++)
		json_decref(g.records[i]);
	free(g.records);
	g.records = NULL;
	g.n_records = 0;
	g.records_alloc = 0;
	g.warned_full = false;
	g.next_seq = 1;
}

static void reset_injection_locked(void)
{
	g.inj.latency_ms = 0;
	g.inj.status = 0;
	g.inj.queue_len = 0;
	g.inj.queue_pos = 0;
	g.inj.hang = false;
	g.inj.retry_after = -1;
	g.inj.n_rules = 0;
}

/* ---------- provider answers ---------- */

static enum MHD_Result send_success(struct MHD_Connection *c, enum provider p,
				    int status, int64_t seq)
{
	if (p == P_KANNEL)
		return send_text(c, status, "0: Accepted for delivery", -1);
	if (p == P_TWILIO) {
		char sid[2 + 32 + 1];
		sid[0] = 'S';
		sid[1] = 'M';
		random_hex(sid + 2, 16);
		return send_json(c, status,
				 json_pack("{s:s,s:s}", "sid", sid, "status",
					   "queued"),
				 -1);
	}
	char id[32];
	snprintf(id, sizeof id, "fp-%" PRId64, seq);
	return send_json(c, status, json_pack("{s:s}", "id", id), -1);
}

static enum MHD_Result handle_provider(struct MHD_Connection *c,
				       const char *url, const char *method,
				       struct request *r)
{
	enum provider p = classify(method, url);
	struct decision d = { .status = 0, .retry_after = -1 };
	const char *why = NULL;

	if (r->oom) {
		d.status = 500;
		why = "out of memory\n";
	} else if (r->too_big) {
		d.status = 413;
		why = "body too large\n";
	} else if (p == P_NONE) {
		d.status = 404;
		why = "no provider route\n";
	}
	json_t *rec = build_record(c, url, method, r, p);
	size_t dest_len = 0;
	char *dest = why == NULL ? destination(rec, p, r, &dest_len) : NULL;
	int64_t seq = commit_record(rec, p, why == NULL, dest, dest_len, &d);
	free(dest);

	if (d.latency_ms > 0 && !wait_ms(d.latency_ms))
		return MHD_NO;
	if (d.hang) {
		hang_until_gone(c);
		return MHD_NO;
	}
	if (why != NULL)
		return send_text(c, d.status, why, -1);
	if (d.status >= 200 && d.status < 300)
		return send_success(c, p, d.status, seq);
	if (d.has_body) {
		char *copy = malloc(d.body_len + 1);
		if (copy == NULL)
			return MHD_NO;
		memcpy(copy, d.body, d.body_len);
		copy[d.body_len] = '\0';
		return send_buf(c, d.status,
				d.body_len > 0 && d.body[0] == '{'
					? "application/json"
					: "text/plain",
				copy, d.body_len, d.retry_after);
	}
	char text[32];
	snprintf(text, sizeof text, "injected %d\n", d.status);
	return send_text(c, d.status, text, d.retry_after);
}

/* ---------- control routes ---------- */

static bool valid_status(json_int_t v, bool zero_ok)
{
	return (zero_ok && v == 0) || (v >= 200 && v <= 599);
}

/* Parse one entry of "rules" into ru; returns an error message or NULL. */
static const char *parse_rule(json_t *obj, struct rule *ru)
{
	if (!json_is_object(obj))
		return "rules entries must be objects";
	bool has_prefix = false;
	bool has_status = false;
	const char *key;
	json_t *val;
	json_object_foreach(obj, key, val) {
		if (strcmp(key, "to_prefix") == 0) {
			if (!json_is_string(val) ||
			    json_string_length(val) < 1 ||
			    json_string_length(val) > RULE_PREFIX_CAP)
				return "rules to_prefix must be a string of "
				       "1..16 bytes";
			ru->prefix_len = json_string_length(val);
			memcpy(ru->prefix, json_string_value(val),
			       ru->prefix_len);
			has_prefix = true;
		} else if (strcmp(key, "status") == 0) {
			if (!json_is_integer(val) ||
			    !valid_status(json_integer_value(val), false))
				return "rules status must be 200..599";
			ru->status = (int)json_integer_value(val);
			has_status = true;
		} else if (strcmp(key, "body") == 0) {
			if (json_is_null(val))
				continue;
			if (!json_is_string(val) ||
			    json_string_length(val) > RULE_BODY_CAP)
				return "rules body must be a string of at most "
				       "1024 bytes or null";
			ru->body_len = json_string_length(val);
			memcpy(ru->body, json_string_value(val), ru->body_len);
			ru->has_body = true;
		} else if (strcmp(key, "hang") == 0) {
			if (!json_is_boolean(val))
				return "rules hang must be a boolean";
			ru->hang = json_is_true(val);
		} else {
			return "rules entries: unknown field";
		}
	}
	if (!has_prefix)
		return "rules entries need to_prefix";
	if (!has_status && !ru->hang)
		return "rules entries need status unless hang is true";
	return NULL;
}

/* Parse one /_control field into pt; returns an error message or NULL. */
static const char *parse_field(const char *key, json_t *val, struct patch *pt)
{
	if (strcmp(key, "latency_ms") == 0) {
		if (!json_is_integer(val) || json_integer_value(val) < 0 ||
		    json_integer_value(val) > MAX_LATENCY_MS)
			return "latency_ms must be an integer 0..600000";
		pt->has_latency = true;
		pt->latency_ms = (long)json_integer_value(val);
	} else if (strcmp(key, "status") == 0) {
		if (!json_is_integer(val) ||
		    !valid_status(json_integer_value(val), true))
			return "status must be 0 or 200..599";
		pt->has_status = true;
		pt->status = (int)json_integer_value(val);
	} else if (strcmp(key, "statuses") == 0) {
		if (!json_is_array(val) || json_array_size(val) > MAX_STATUSES)
			return "statuses must be an array of at most 4096";
		size_t i;
		json_t *v;
		json_array_foreach(val, i, v) {
			if (!json_is_integer(v) ||
			    !valid_status(json_integer_value(v), true))
				return "statuses entries must be 0 or 200..599";
			pt->queue[i] = (int)json_integer_value(v);
		}
		pt->has_queue = true;
		pt->queue_len = json_array_size(val);
	} else if (strcmp(key, "hang") == 0) {
		if (!json_is_boolean(val))
			return "hang must be a boolean";
		pt->has_hang = true;
		pt->hang = json_is_true(val);
	} else if (strcmp(key, "retry_after") == 0) {
		if (json_is_null(val)) {
			pt->retry_after = -1;
		} else if (json_is_integer(val) &&
			   json_integer_value(val) >= 0 &&
			   json_integer_value(val) <= MAX_RETRY_AFTER) {
			pt->retry_after = (long)json_integer_value(val);
		} else {
			return "retry_after must be an integer 0..86400 or null";
		}
		pt->has_retry = true;
	} else if (strcmp(key, "rules") == 0) {
		if (!json_is_array(val) || json_array_size(val) > MAX_RULES)
			return "rules must be an array of at most 16";
		size_t i;
		json_t *v;
		json_array_foreach(val, i, v) {
			const char *err = parse_rule(v, &pt->rules[i]);
			if (err != NULL)
				return err;
		}
		pt->has_rules = true;
		pt->n_rules = json_array_size(val);
	} else {
		return "unknown field";
	}
	return NULL;
}

static void apply_patch_locked(const struct patch *pt)
{
	if (pt->has_latency)
		g.inj.latency_ms = pt->latency_ms;
	if (pt->has_status)
		g.inj.status = pt->status;
	if (pt->has_queue) {
		memcpy(g.inj.queue, pt->queue,
		       pt->queue_len * sizeof pt->queue[0]);
		g.inj.queue_len = pt->queue_len;
		g.inj.queue_pos = 0;
	}
	if (pt->has_hang)
		g.inj.hang = pt->hang;
	if (pt->has_retry)
		g.inj.retry_after = pt->retry_after;
	if (pt->has_rules) {
		memcpy(g.inj.rules, pt->rules,
		       pt->n_rules * sizeof pt->rules[0]);
		g.inj.n_rules = pt->n_rules;
	}
}

static enum MHD_Result control_set(struct MHD_Connection *c,
				   const struct request *r)
{
	json_error_t jerr;
	json_t *obj = json_loadb(r->body ? r->body : "", r->body_len, 0, &jerr);
	if (!json_is_object(obj)) {
		json_decref(obj);
		return send_error(c, 400, "body must be a JSON object");
	}
	struct patch *pt = calloc(1, sizeof *pt);
	if (pt == NULL) {
		json_decref(obj);
		return send_error(c, 500, "out of memory");
	}
	const char *key;
	const char *bad_key = "";
	json_t *val;
	const char *err = NULL;
	json_object_foreach(obj, key, val) {
		err = parse_field(key, val, pt);
		if (err != NULL) {
			bad_key = key;
			break;
		}
	}
	enum MHD_Result ret;
	if (err != NULL) {
		char msg[256];
		snprintf(msg, sizeof msg, "%s: %.100s", err, bad_key);
		ret = send_error(c, 400, msg);
	} else {
		pthread_mutex_lock(&g.lock);
		apply_patch_locked(pt);
		pthread_mutex_unlock(&g.lock);
		ret = send_json(c, 200, json_pack("{s:b}", "ok", 1), -1);
	}
	free(pt);
	json_decref(obj);
	return ret;
}

static json_t *rule_to_json(const struct rule *ru)
{
	return json_pack("{s:o,s:o,s:o,s:b}", "to_prefix",
			 jstr(ru->prefix, ru->prefix_len), "status",
			 ru->status ? json_integer(ru->status) : json_null(),
			 "body",
			 ru->has_body ? jstr(ru->body, ru->body_len)
				      : json_null(),
			 "hang", ru->hang ? 1 : 0);
}

static enum MHD_Result control_get(struct MHD_Connection *c)
{
	json_t *queue = json_array();
	json_t *rules = json_array();
	pthread_mutex_lock(&g.lock);
	for (size_t i = g.inj.queue_pos; queue && i < g.inj.queue_len; i++)
		json_array_append_new(queue, json_integer(g.inj.queue[i]));
	for (size_t i = 0; rules && i < g.inj.n_rules; i++)
		json_array_append_new(rules, rule_to_json(&g.inj.rules[i]));
	json_t *j = json_pack("{s:I,s:i,s:o,s:b,s:o,s:o}", "latency_ms",
			      (json_int_t)g.inj.latency_ms, "status",
			      g.inj.status, "statuses", queue, "hang",
			      g.inj.hang ? 1 : 0, "retry_after",
			      g.inj.retry_after < 0
				      ? json_null()
				      : json_integer(g.inj.retry_after),
			      "rules", rules);
	pthread_mutex_unlock(&g.lock);
	return send_json(c, 200, j, -1);
}

static enum MHD_Result send_requests(struct MHD_Connection *c)
{
	char *s = NULL;
	pthread_mutex_lock(&g.lock);
	json_t *arr = json_array();
	if (arr != NULL) {
		for (size_t i = 0; i < g.n_records; i++)
			json_array_append(arr, g.records[i]);
		s = json_dumps(arr, JSON_COMPACT);
		json_decref(arr);
	}
	pthread_mutex_unlock(&g.lock);
	if (s == NULL)
		return send_text(c, 500, "out of memory\n", -1);
	return send_buf(c, 200, "application/json", s, strlen(s), -1);
}

static enum MHD_Result handle_control(struct MHD_Connection *c,
				      const char *url, const char *method,
				      const struct request *r)
{
	bool get = strcmp(method, "GET") == 0;
	bool post = strcmp(method, "POST") == 0;

	if (r->too_big)
		return send_error(c, 413, "body too large");
	if (strcmp(url, "/_control") == 0) {
		if (post)
			return control_set(c, r);
		if (get)
			return control_get(c);
	} else if (strcmp(url, "/_reset") == 0) {
		if (post) {
			pthread_mutex_lock(&g.lock);
			clear_records_locked();
			reset_injection_locked();
			pthread_mutex_unlock(&g.lock);
			return send_json(c, 200, json_pack("{s:b}", "ok", 1),
					 -1);
		}
	} else if (strcmp(url, "/_requests") == 0) {
		if (get)
			return send_requests(c);
	} else {
		return send_error(c, 404, "no such control route");
	}
	return send_error(c, 405, "method not allowed");
}

/* ---------- MHD entry point ---------- */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
				  const char *url, const char *method,
				  const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	(void)cls;
	(void)version;
	struct request *r = *con_cls;
	if (r == NULL) {
		r = request_new(NULL);
		if (r == NULL)
			return MHD_NO;
		*con_cls = r;
	}
	if (!r->started) {
		r->started = true;
		r->t_us = now_realtime_us();
		return MHD_YES;
	}
	if (*upload_data_size > 0) {
		body_append(r, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (strncmp(url, "/_", 2) == 0)
		return handle_control(c, url, method, r);
	return handle_provider(c, url, method, r);
}

/* ---------- startup ---------- */

static void usage(FILE *f)
{
	fprintf(f, "usage: fake_provider --port N [--bind ADDR] [--log FILE]\n");
}

static bool parse_port(const char *s, uint16_t *out)
{
	char *end = NULL;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < 0 || v > 65535)
		return false;
	*out = (uint16_t)v;
	return true;
}

struct options {
	uint16_t port;
	bool have_port;
	const char *bind;
	const char *log;
};

static int parse_args(int argc, char **argv, struct options *o)
{
	o->bind = "127.0.0.1";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			usage(stdout);
			return 1;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "fake_provider: bad or incomplete "
					"option: %s\n", a);
			return -1;
		}
		const char *v = argv[++i];
		if (strcmp(a, "--port") == 0) {
			if (!parse_port(v, &o->port)) {
				fprintf(stderr, "fake_provider: bad port: %s\n",
					v);
				return -1;
			}
			o->have_port = true;
		} else if (strcmp(a, "--bind") == 0) {
			o->bind = v;
		} else if (strcmp(a, "--log") == 0) {
			o->log = v;
		} else {
			fprintf(stderr, "fake_provider: unknown option: %s\n",
				a);
			return -1;
		}
	}
	if (!o->have_port) {
		fprintf(stderr, "fake_provider: --port is required\n");
		return -1;
	}
	return 0;
}

/* Thousands of connections need more than the usual 1024 descriptors. */
static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= NOFILE_WANT)
		return;
	rl.rlim_cur = rl.rlim_max < NOFILE_WANT ? rl.rlim_max : NOFILE_WANT;
	setrlimit(RLIMIT_NOFILE, &rl);
}

/*
 * MHD's own messages are shown only while starting (e.g. bind errors);
 * afterwards they are mostly noise from hung or aborted test requests.
 */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	if (!atomic_load(&g_started))
		vfprintf(stderr, fmt, ap);
}

static struct MHD_Daemon *start_daemon(const struct options *o)
{
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_port = htons(o->port);
	if (inet_pton(AF_INET, o->bind, &sa.sin_addr) != 1) {
		fprintf(stderr, "fake_provider: bad --bind address: %s\n",
			o->bind);
		return NULL;
	}
	unsigned int flags = MHD_USE_THREAD_PER_CONNECTION |
			     MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
			     MHD_USE_ERROR_LOG;
	struct MHD_Daemon *d = MHD_start_daemon(
		flags, o->port, NULL, NULL, &on_request, NULL,
		MHD_OPTION_EXTERNAL_LOGGER, &mhd_log, NULL,
		MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
		MHD_OPTION_CONNECTION_LIMIT, CONN_LIMIT,
		MHD_OPTION_CONNECTION_TIMEOUT, CONN_TIMEOUT_S,
		MHD_OPTION_LISTEN_BACKLOG_SIZE, CONN_LIMIT,
		MHD_OPTION_THREAD_STACK_SIZE, (size_t)THREAD_STACK,
		MHD_OPTION_URI_LOG_CALLBACK, &uri_logger, NULL,
		MHD_OPTION_NOTIFY_COMPLETED, &request_completed, NULL,
		MHD_OPTION_END);
	if (d == NULL)
		fprintf(stderr, "fake_provider: cannot listen on %s:%u\n",
			o->bind, (unsigned int)o->port);
	return d;
}

/* Never runs: the signals are blocked and taken with sigwait(). */
static void on_stop_signal(int sig)
{
	(void)sig;
}

int main(int argc, char **argv)
{
	struct options o;
	memset(&o, 0, sizeof o);
	int rc = parse_args(argc, argv, &o);
	if (rc != 0)
		return rc > 0 ? 0 : 2;

	if (o.log != NULL) {
		g.log = fopen(o.log, "a");
		if (g.log == NULL) {
			fprintf(stderr, "fake_provider: cannot open %s: %s\n",
				o.log, strerror(errno));
			return 1;
		}
	}
	reset_injection_locked();
	raise_fd_limit();
	signal(SIGPIPE, SIG_IGN);

	/*
	 * Block the stop signals in every thread; main collects them. A
	 * handler is installed first because a signal that is ignored (as
	 * SIGINT is for background jobs of a shell) is never delivered.
	 */
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);

	struct MHD_Daemon *d = start_daemon(&o);
	if (d == NULL) {
		if (g.log != NULL)
			fclose(g.log);
		return 1;
	}
	const union MHD_DaemonInfo *di =
		MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	atomic_store(&g_started, true);
	printf("ready %u\n", di ? (unsigned int)di->port : (unsigned int)o.port);
	fflush(stdout);

	int sig = 0;
	while (sigwait(&stop, &sig) != 0)
		;
	atomic_store(&g_stopping, true);
	MHD_stop_daemon(d);

	pthread_mutex_lock(&g.lock);
	clear_records_locked();
	pthread_mutex_unlock(&g.lock);
	if (g.log != NULL)
		fclose(g.log);
	return 0;
}
