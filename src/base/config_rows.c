/*
 * config_rows: the key table, one row per key the file may hold, in the
 * order errors are reported and docs/config.md lists them (`make config-doc`).
 * Rows only: config_int.h says what a row holds and gives the macros that
 * write one; conftab.c walks them; the hooks a row names live in the
 * config_*.c of its section. A new key is one row here and its field in its
 * section (conf.h). Read at start-up, on SIGHUP and for
 * --print-config-table.
 */
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "config_int.h"

static const char *const cfg_sending_names[] = {"resend", "fail", NULL};
static const char *const cfg_log_formats[] = {"text", "json", NULL};                 /* enum log_format's */
static const char *const cfg_log_levels[] = {"debug", "info", "warn", "error", NULL}; /* enum log_level's */

const struct cfg_row cfg_rows[] = {
    CFG_SECTION("", CFG_REQUIRED, cfg_root),
    CFG_HOOKED(STR, "listen", CFG_REQUIRED, .hi = 63, .what = "HOST:PORT, [V6]:PORT",
     .doc = "the API's address"),
    CFG_HOOKED(STR, "listen_internal", 0, .hi = 63, .what = "HOST:PORT, [V6]:PORT; not listen's",
     .doc = "a second listener, plain HTTP, that alone serves `/healthz`, `/readyz` and `/metrics` (`listen` "
     "then answers 404 there): keep it on loopback or a private interface"),
    CFG_SECTION("tls", 0, cfg_tls,
     .doc = "HTTPS on `listen` (docs/operations.md, \"TLS and private probes\"); absent: plain HTTP"),
    CFG_STR("tls.cert", CFG_REQUIRED | CFG_RELOAD, tls.cert, 0, NULL, .what = "a PEM file",
     .doc = "the certificate, then its intermediates; read again on SIGHUP (new handshakes get it, open "
     "connections stay; a bad one is refused and the old one kept)"),
    CFG_STR("tls.key", CFG_REQUIRED | CFG_RELOAD, tls.key, 0, NULL, .what = "a PEM file, unencrypted",
     .doc = "the certificate's private key; read with the certificate, never logged"),
    /* 32 by default: a worker blocks through an accepted issue's two Redis
     * round trips and its group commit (about 7 ms), so 4 workers capped
     * accepted issues near 570/s and a commit grouped at most 4 of them.
     * Measured on 2 shared CPUs (issue 13's bench, wrk 64 connections, 5 s
     * runs, three sessions; figures are / ceiling B, the bare MHD 429 with
     * as many workers): accepted issues 4: .0063 .0139 .0280, 8: .0103
     * .0191, 16: .0138 .0202, 32: .0207 .0351 .0457, 64: .0272 .0202;
     * hot-key refusals 4: .152 .110 .129, 8: .112 .161, 16: .068 (with
     * 503s) .164, 32: .160 .213 .239, 64: .188 .148. 32 was first or
     * second in every session on both; the ledger groups 5 accepted issues
     * per commit at 32 against 1.5 at 4. Idle workers cost a stack each. */
    CFG_INT("http_threads", 0, http.threads, 1, 256, "32", .doc = "libmicrohttpd worker threads"),
    CFG_SECTION("http", 0, NULL),
    CFG_INT("http.max_conns_per_ip", 0, http.max_conns_per_ip, 1024, 1000000, "1024",
     .doc = "connections one client address may hold open; the next is closed at once"),
    CFG_DUR("http.request_timeout", 0, http.request_timeout_ms, 1000, 300000, "30s",
     .doc = "a request (headers and body) must arrive whole within this of the connection opening or of the "
     "previous answer on it; otpd then shuts the connection itself, whatever the client keeps dribbling "
     "(libmicrohttpd's own timeout is for inactivity only)"),
    CFG_SECTION("log", 0, NULL),
    CFG_ENUM("log.format", 0, log.format, cfg_log_formats, "text",
     .doc = "`text` (readable, then `key=value` pairs) or `json` (one object per line)"),
    CFG_ENUM("log.level", CFG_RELOAD, log.level, cfg_log_levels, "info", .doc = "the lowest level written"),
    CFG_SECTION("redis", CFG_REQUIRED, cfg_redis),
    CFG_HOOKED(STR, "redis.url", 0, .what = "redis://HOST[:PORT][/DB]; required without redis.sentinel",
     .doc = "a password in the URL is refused"),
    CFG_SECTION("redis.sentinel", 0, NULL,
     .doc = "Redis behind Sentinel. Each new connection asks the sentinels in turn where the master is and "
     "checks `ROLE`; after a failover the breaker's probe finds the new master. `redis.url` is then optional "
     "and gives only the database. Sentinels without a password only."),
    CFG_CUSTOM("redis.sentinel.addrs", CFG_REQUIRED, cfg_sentinel_addrs, .what = "1 to 8 \"HOST:PORT\""),
    CFG_STR("redis.sentinel.master", CFG_REQUIRED, redis.master, 0, NULL),
    CFG_ENV("redis.password_env", 0, redis.password, 1,
     .doc = "the environment variable holding Redis's password"),
    CFG_HOOKED(STR, "redis.username", 0, .hi = CFG_NAME_MAX - 1,
     .what = "ACL user, printable ASCII; needs redis.password_env",
     .doc = "otpd sends `AUTH username password`"),
    CFG_INT("redis.timeout_ms", 0, redis.timeout_ms, 1, 10000, "50", .doc = "one Redis call"),
    CFG_INT("redis.breaker_failures", 0, redis.breaker_failures, 1, 1000, "5",
     .doc = "consecutive Redis failures that open the circuit breaker"),
    CFG_DUR("redis.breaker_open", 0, redis.breaker_open_ms, 0, 0, "2s",
     .doc = "how long the breaker answers 503 at once before a probe"),
    CFG_SECTION("ledger", CFG_REQUIRED, NULL),
    CFG_STR("ledger.path", CFG_REQUIRED, ledger.path, 0, NULL, .doc = "the SQLite audit ledger"),
    CFG_DUR("ledger.retention", 0, ledger.retention_ms, 1000, 0, "90d",
     .doc = "rows older than this are pruned (at start, then hourly); messages still queued or sending are "
     "kept"),
    CFG_ENV("secret_env", CFG_REQUIRED, secret, 32,
     .doc = "the variable holding the key codes are derived from"),
    CFG_CUSTOM("api_keys", CFG_REQUIRED, cfg_api_keys, .what = "1 to 256 objects", .doc = "the callers"),
    CFG_HOOKED(STR, "api_keys.*.name", CFG_REQUIRED, .hi = CFG_NAME_MAX - 1,
     .what = "A-Z, a-z, 0-9, '.', '_', '-'; unique"),
    CFG_HOOKED(ENV, "api_keys.*.key_env", CFG_REQUIRED, .lo = 16),
    CFG_HOOKED(ENUM, "api_keys.*.role", 0, .names = cfg_role_names,
     .what = "\"admin\": the admin API only; absent: the OTP API only"),
    CFG_HOOKED(STR, "api_keys.*.webotp_origin", 0, .hi = CFG_ORIGIN_MAX, .what = "a host name",
     .doc = "the caller's messages end with the origin-bound line `@<origin> #<code>` that browsers' WebOTP API "
     "and iOS autofill read"),
    CFG_HOOKED(SECTION, "api_keys.*.twilio", 0,
     .doc = "the caller's account on the Twilio Verify surface, `/v2` (docs/twilio-verify.md); not for an admin "
     "key"),
    CFG_HOOKED(STR, "api_keys.*.twilio.account_sid", CFG_REQUIRED, .what = "AC and 32 hex digits; unique",
     .doc = "Basic auth with it and the caller's key is this caller on `/v2`"),
    CFG_HOOKED(CUSTOM, "api_keys.*.twilio.api_keys", 0, .what = "at most 8 objects",
     .doc = "API keys of the account: Basic auth with a key's SID and its secret is this caller on `/v2`"),
    CFG_HOOKED(STR, "api_keys.*.twilio.api_keys.*.sid", CFG_REQUIRED, .what = "SK and 32 hex digits; unique"),
    CFG_HOOKED(ENV, "api_keys.*.twilio.api_keys.*.secret_env", CFG_REQUIRED, .lo = 16),
    CFG_SECTION("otp", CFG_REQUIRED, cfg_otp),
    CFG_INT("otp.length", 0, otp.length, 4, 10, "6", .doc = "digits of a code"),
    CFG_DUR("otp.ttl", CFG_RELOAD, otp.ttl_ms, 10000, 3600000, "5m", .doc = "a code's life"),
    CFG_INT("otp.max_attempts", 0, otp.max_attempts, 1, 100, "5",
     .doc = "wrong guesses before a code is dead"),
    CFG_INT("otp.idempotency_keys", 0, otp.idem_keys, 1, 10000000, "100000",
     .doc = "Idempotency-Keys one caller may hold at once (each kept 24 h, under 1 KB of Redis); past that, "
     "429 `idempotency_keys`"),
    CFG_STR("otp.template", CFG_RELOAD, otp.tmpl, 320,
     "{code} is your login code. It expires in {minutes} minutes.",
     .doc = "the SMS text: `{code}`, `{minutes}`, `{name}` (a Verify service's name; empty on /v1); the default "
     "template"),
    CFG_CUSTOM("otp.templates", CFG_RELOAD, cfg_templates, .what = "at most 32 \"locale\": \"template\" pairs",
     .doc = "a template per locale (`\"hi\"`, `\"pt-BR\"`), picked by an issue's `locale` (then its language "
     "alone, then otp.template); each as otp.template"),
    CFG_SECTION("phone", 0, NULL),
    CFG_CUSTOM("phone.types", 0, cfg_phone,
     .what = "libphonenumber's number types; default mobile, fixed_line_or_mobile",
     .doc = "number types served; others are 403 `number_type`"),
    CFG_SECTION("countries", CFG_RELOAD, cfg_countries, .doc = "by region, before any rule (docs/rules.md)"),
    CFG_CUSTOM("countries.allow", CFG_RELOAD, cfg_countries_allow,
     .what = "region codes (\"IN\", \"001\"); absent: every region"),
    CFG_CUSTOM("countries.deny", CFG_RELOAD, cfg_countries_deny, .what = "region codes"),
    CFG_CUSTOM("countries.monitor", CFG_RELOAD, cfg_countries_monitor,
     .what = "region codes: served, counted and logged"),
    CFG_SECTION("pumping", CFG_RELOAD, cfg_pumping,
     .doc = "the SMS pumping guard; absent: off (docs/rules.md)"),
    CFG_INT("pumping.prefix_digits", CFG_RELOAD, limits.pumping.prefix_digits, 3, 15, "7"),
    CFG_DUR("pumping.window", CFG_RELOAD, limits.pumping.window_ms, 60000, 7 * 86400000LL, "1h"),
    CFG_INT("pumping.min_sent", CFG_RELOAD, limits.pumping.min_sent, 1, 1000000, "30"),
    CFG_PPM("pumping.min_verified_ratio", CFG_RELOAD, limits.pumping.min_ratio_ppm, "0.2"),
    CFG_DUR("pumping.hold", CFG_RELOAD, limits.pumping.hold_ms, 1000, CFG_30D_MS, "12h"),
    CFG_ENUM("pumping.mode", CFG_RELOAD, limits.pumping.shadow, cfg_mode_names, "enforce"),
    CFG_CUSTOM("limits", CFG_RELOAD, cfg_limits, .what = "at most 32 rules (docs/rules.md)",
     .doc = "the rules (docs/rules.md)"),
    CFG_HOOKED(STR, "limits.*.name", CFG_REQUIRED | CFG_RELOAD, .hi = 32, .what = "a-z, 0-9, _; unique"),
    CFG_HOOKED(CUSTOM, "limits.*.key", CFG_REQUIRED | CFG_RELOAD,
     .what = "phone, device, client_ip, api_key, global, purpose, phone_prefix:N, region, or a list of 1 to "
     "4"),
    CFG_HOOKED(ENUM, "limits.*.algorithm", CFG_REQUIRED | CFG_RELOAD, .names = cfg_algo_names),
    CFG_HOOKED(INT, "limits.*.limit", CFG_RELOAD, .lo = 1, .hi = 1000000000,
     .what = "1 to 1000 (sliding_log, wrong_guess_cap: their memory grows with the limit), 10^6 "
     "(sliding_window_counter), 10^9 (fixed_window; token_bucket: at most one per ms of its window); not for "
     "resend_delay"),
    CFG_HOOKED(DUR, "limits.*.window", CFG_RELOAD,
     .what = "at most 30d for sliding_window_counter; not for resend_delay"),
    CFG_HOOKED(INT, "limits.*.burst", CFG_RELOAD, .lo = 1, .hi = 1000000000,
     .what = "token_bucket only; default its limit"),
    CFG_HOOKED(DUR, "limits.*.delay", CFG_RELOAD, .what = "resend_delay only"),
    CFG_HOOKED(ENUM, "limits.*.mode", CFG_RELOAD, .names = cfg_mode_names, .def = "enforce"),
    CFG_HOOKED(ENUM, "limits.*.on", CFG_RELOAD, .names = cfg_on_names, .def = "issue"),
    CFG_HOOKED(ENUM, "limits.*.if_store_down", CFG_RELOAD, .names = cfg_down_names, .def = "fail_closed"),
    CFG_HOOKED(INT, "limits.*.local_limit", CFG_RELOAD, .lo = 1, .hi = 1000000000),
    CFG_HOOKED(SECTION, "limits.*.penalty", CFG_RELOAD, .what = "not for wrong_guess_cap"),
    CFG_HOOKED(INT, "limits.*.penalty.after", CFG_REQUIRED | CFG_RELOAD, .lo = 1, .hi = 1000000),
    CFG_HOOKED(DUR, "limits.*.penalty.within", CFG_REQUIRED | CFG_RELOAD, .lo = 1000, .hi = CFG_30D_MS),
    CFG_HOOKED(DUR, "limits.*.penalty.block", CFG_REQUIRED | CFG_RELOAD, .lo = 1000, .hi = CFG_30D_MS),
    CFG_SECTION("cost", 0, cfg_cost, .doc = "prices and spend caps"),
    CFG_STR("cost.currency", CFG_REQUIRED, limits.currency, 0, NULL, .what = "ISO 4217: \"INR\", \"USD\""),
    CFG_CUSTOM("cost.prices", CFG_REQUIRED | CFG_RELOAD, cfg_prices,
     .what = "{\"+PREFIX\" or \"*\": minor units}; a \"*\" with caps"),
    CFG_CUSTOM("cost.caps", CFG_RELOAD, cfg_caps, .what = "at most 8"),
    CFG_HOOKED(DUR, "cost.caps.*.window", CFG_REQUIRED | CFG_RELOAD),
    CFG_HOOKED(INT, "cost.caps.*.max", CFG_REQUIRED | CFG_RELOAD, .lo = 0, .hi = INT64_MAX / 4,
     .what = "minor units"),
    CFG_HOOKED(ENUM, "cost.caps.*.key", CFG_RELOAD, .names = cfg_cap_key_names,
     .what = "absent: one budget for the fleet"),
    CFG_SECTION("refusal_cache", 0, NULL,
     .doc = "refusals that only their own end or an admin change can lift (a sliding log, a fixed window, a "
     "resend delay, a lock, a penalty block), answered from memory until then; never past the real refusal's "
     "end (docs/architecture.md, \"The refusal cache\")"),
    CFG_INT("refusal_cache.max_entries", 0, limits.refusal_cache.max_entries, 0, 100000000, "1000000",
     .what = "0 turns the cache off",
     .doc = "refusals remembered at most, the least recently used dropped first (about 170 bytes each, up to "
     "370 with long composite keys)"),
    CFG_SECTION("pacer", 0, NULL),
    CFG_INT("pacer.rate", 0, pacer.rate, 1, 10000, "50", .what = "sends per second",
     .doc = "the fleet's sends per second"),
    CFG_INT("pacer.capacity", 0, pacer.capacity, 1, 1000000, "500", .doc = "messages queued fleet-wide"),
    CFG_RATIO("pacer.share_per_key", 0, pacer.share_per_key, "1",
     .doc = "the part of capacity one caller may hold"),
    CFG_INT("pacer.max_inflight", 0, pacer.max_inflight, 1, 1024, "32",
     .doc = "provider calls at once per instance"),
    CFG_SECTION("pacer.retry", 0, NULL),
    CFG_INT("pacer.retry.max", 0, pacer.retry_max, 0, 20, "3", .doc = "retries after the first attempt"),
    CFG_DUR("pacer.retry.base", 0, pacer.retry_base_ms, 0, 0, "500ms",
     .doc = "the first backoff, doubled each retry"),
    CFG_DUR("pacer.timeout", 0, pacer.timeout_ms, 0, 0, "10s", .doc = "one provider call, connect included"),
    CFG_DUR("pacer.takeover", 0, pacer.takeover_ms, 1000, 600000, "10s",
     .doc = "a message claimed by an instance that has not touched its claims for this long is taken over by "
     "another"),
    CFG_STR("pacer.instance", 0, pacer.instance, 0, NULL, .what = "default HOSTNAME:PORT",
     .doc = "this instance's name in the fleet's consumer group: unique per live instance, the same across "
     "its restarts (a restart takes its own messages back at once)"),
    CFG_ENUM("pacer.on_restart_sending", 0, pacer.on_restart_sending, cfg_sending_names, "resend",
     .doc = "a message taken back after a crash (by its instance's restart or a takeover) while it was "
     "`sending`: `resend` (at least once; duplicates at most the dead instance's `max_inflight`) or `fail`"),
    CFG_CUSTOM("providers", 0, cfg_providers,
     .what = "{name: a provider as provider's keys, and rate, capacity, max_inflight, timeout, retry, prices, "
     "breaker}; at most 8",
     .doc = "several providers, each paced, priced and failed over on its own (docs/providers.md); instead of "
     "provider; a change needs a restart"),
    CFG_CUSTOM("routes", CFG_RELOAD, cfg_routes,
     .what = "[{\"match\": \"IN\", \"+4474\" or \"*\", \"providers\": [names, in order]}]; at most 64",
     .doc = "which providers a destination goes to, the most specific match first; with providers"),
    CFG_SECTION("failover", 0, NULL, .doc = "when a message moves to the next provider of its route (docs/providers.md)"),
    CFG_INT("failover.max_providers", CFG_RELOAD, network.max_providers, 1, ROUTE_PROVIDERS_MAX, "2",
     .doc = "providers one message may go to, its first included"),
    CFG_RATIO("failover.report_min_life", CFG_RELOAD, network.report_min_life, "0.5",
     .doc = "a delivery report that says failed sends the code again on the route's next provider while at least "
     "this part of its life (otp.ttl) is left"),
    CFG_SECTION("provider", 0, cfg_provider, .what = "required unless providers is given"),
    CFG_ENUM("provider.type", CFG_REQUIRED, provider.type, cfg_provider_names, NULL,
     .doc = "the SMS provider's adapter"),
    CFG_STR("provider.path", 0, provider.path, 0, NULL, .what = "file: required"),
    CFG_STR("provider.url", 0, provider.url, 0, NULL, .what = "webhook, kannel: required, http(s)://"),
    CFG_STR("provider.from", 0, provider.from, 0, NULL,
     .what = "kannel: required; twilio: this or messaging_service_sid"),
    CFG_STR("provider.base_url", 0, provider.base_url, 0, "https://api.twilio.com", .what = "twilio"),
    CFG_HOOKED(ENV, "provider.username_env", 0, .lo = 1, .what = "kannel: required"),
    CFG_HOOKED(ENV, "provider.password_env", 0, .lo = 1, .what = "kannel: required"),
    CFG_STR("provider.smsc", 0, provider.smsc, 63, NULL, .what = "kannel: an smsc-id, no spaces or ';'",
     .doc = "sendsms `smsc`: the SMSC Kannel routes through (absent: Kannel's routing)"),
    CFG_HOOKED(INT, "provider.priority", 0, .lo = 0, .hi = 3, .what = "kannel",
     .doc = "sendsms `priority` (absent: not sent)"),
    CFG_HOOKED(DUR, "provider.validity", 0, .lo = 60000, .hi = 86400000, .what = "kannel: whole minutes",
     .doc = "sendsms `validity`, in minutes (absent: each code's remaining life, rounded up)"),
    CFG_INT("provider.dlr_mask", 0, provider.dlr_mask, 1, 31, "19", .what = "kannel: needs callback_url",
     .doc = "sendsms `dlr-mask`: the report types asked for (19: delivered, undelivered, SMSC reject)"),
    CFG_HOOKED(ENV, "provider.account_sid_env", 0, .lo = 1, .what = "twilio: required; AC and 32 hex digits"),
    CFG_HOOKED(ENV, "provider.auth_token_env", 0, .lo = 1,
     .what = "twilio: this or the API key; with an API key, only with callback_url",
     .doc = "basic auth with the account SID, and the key of status callbacks' X-Twilio-Signature"),
    CFG_HOOKED(ENV, "provider.api_key_sid_env", 0, .lo = 1,
     .what = "twilio: SK and 32 hex digits; with api_key_secret_env",
     .doc = "basic auth with an API key instead of the auth token"),
    CFG_HOOKED(ENV, "provider.api_key_secret_env", 0, .lo = 1, .what = "twilio: with api_key_sid_env"),
    CFG_STR("provider.messaging_service_sid", 0, provider.messaging_service, 0, NULL,
     .what = "twilio: MG and 32 hex digits; this or from",
     .doc = "sent as `MessagingServiceSid` instead of `From`"),
    CFG_HOOKED(ENV, "provider.token_env", 0, .lo = 16, .what = "webhook",
     .doc = "sent as `Authorization: Bearer <token>`"),
    CFG_HOOKED(ENV, "provider.signing_secret_env", 0, .lo = 32, .what = "webhook",
     .doc = "signs each request: `X-Otpd-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of \"t.body\">`"),
    CFG_STR("provider.callback_url", 0, provider.callback_url, 0, NULL,
     .what = "otpd's own base URL for delivery reports",
     .doc = "with it Kannel and Twilio send delivery reports to `/v1/dlr/kannel` and `/v1/dlr/twilio` (see "
     "\"Delivery reports\")"),
    CFG_DUR("provider.callback_ttl", 0, provider.callback_ttl_ms, 1000, CFG_30D_MS, "7d",
     .doc = "how long a report URL is accepted after its message was accepted"),
};
const size_t cfg_n_rows = sizeof(cfg_rows) / sizeof(cfg_rows[0]);
