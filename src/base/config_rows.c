/*
 * config_rows: the key table, one row per key the file may hold, in the
 * order errors are reported and README lists them (`make config-doc`).
 * Rows only: config_int.h says what a row holds; conftab.c walks them; the hooks a row names live in the
 * config_*.c of its section. A new key is one row here and its field in its
 * section (conf.h). Read at start-up, on SIGHUP and for
 * --print-config-table.
 */
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "config_int.h"

#define CFG_AT(f) offsetof(struct config, f), sizeof(((struct config *)0)->f)
#define CFG_NONE 0, 0

static const char *const cfg_sending_names[] = {"resend", "fail", NULL};
static const char *const cfg_log_formats[] = {"text", "json", NULL};                 /* enum log_format's order */
static const char *const cfg_log_levels[] = {"debug", "info", "warn", "error", NULL}; /* enum log_level's */

const struct cfg_row cfg_rows[] = {
    {"", CFG_T_SECTION, CFG_REQUIRED, CFG_NONE, 0, 0, NULL, NULL, cfg_root, NULL, NULL},
    {"listen", CFG_T_STR, CFG_BYHOOK | CFG_REQUIRED, CFG_NONE, 0, 63, NULL, NULL, NULL, "HOST:PORT, [V6]:PORT",
     "the API's address"},
    {"listen_internal", CFG_T_STR, CFG_BYHOOK, CFG_NONE, 0, 63, NULL, NULL, NULL,
     "HOST:PORT, [V6]:PORT; not listen's",
     "a second listener, plain HTTP, that alone serves `/healthz`, `/readyz` and `/metrics` (`listen` then "
     "answers 404 there): keep it on loopback or a private interface"},
    {"tls", CFG_T_SECTION, 0, CFG_NONE, 0, 0, NULL, NULL, cfg_tls, NULL,
     "HTTPS on `listen` (README, \"TLS and private probes\"); absent: plain HTTP"},
    {"tls.cert", CFG_T_STR, CFG_REQUIRED | CFG_RELOAD, CFG_AT(tls.cert), 0, 0, NULL, NULL, NULL, "a PEM file",
     "the certificate, then its intermediates; read again on SIGHUP (new handshakes get it, open connections "
     "stay; a bad one is refused and the old one kept)"},
    {"tls.key", CFG_T_STR, CFG_REQUIRED | CFG_RELOAD, CFG_AT(tls.key), 0, 0, NULL, NULL, NULL,
     "a PEM file, unencrypted", "the certificate's private key; read with the certificate, never logged"},
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
    {"http_threads", CFG_T_INT, 0, CFG_AT(http.threads), 1, 256, "32", NULL, NULL, NULL,
     "libmicrohttpd worker threads"},
    {"http", CFG_T_SECTION, 0, CFG_NONE, 0, 0, NULL, NULL, NULL, NULL, NULL},
    {"http.max_conns_per_ip", CFG_T_INT, 0, CFG_AT(http.max_conns_per_ip), 1024, 1000000, "1024", NULL, NULL, NULL,
     "connections one client address may hold open; the next is closed at once"},
    {"http.request_timeout", CFG_T_DUR, 0, CFG_AT(http.request_timeout_ms), 1000, 300000, "30s", NULL, NULL, NULL,
     "a request (headers and body) must arrive whole within this of the connection opening or of the "
     "previous answer on it; otpd then shuts the connection itself, whatever the client keeps dribbling "
     "(libmicrohttpd's own timeout is for inactivity only)"},
    {"log", CFG_T_SECTION, 0, CFG_NONE, 0, 0, NULL, NULL, NULL, NULL, NULL},
    {"log.format", CFG_T_ENUM, 0, CFG_AT(log.format), 0, 0, "text", cfg_log_formats, NULL, NULL,
     "`text` (readable, then `key=value` pairs) or `json` (one object per line)"},
    {"log.level", CFG_T_ENUM, CFG_RELOAD, CFG_AT(log.level), 0, 0, "info", cfg_log_levels, NULL, NULL,
     "the lowest level written"},
    {"redis", CFG_T_SECTION, CFG_REQUIRED, CFG_NONE, 0, 0, NULL, NULL, cfg_redis, NULL, NULL},
    {"redis.url", CFG_T_STR, CFG_BYHOOK, CFG_NONE, 0, 0, NULL, NULL, NULL,
     "redis://HOST[:PORT][/DB]; required without redis.sentinel",
     "a password in the URL is refused"},
    {"redis.sentinel", CFG_T_SECTION, 0, CFG_NONE, 0, 0, NULL, NULL, NULL, NULL,
     "Redis behind Sentinel. Each new connection asks the sentinels in turn where the master is and checks"
     " `ROLE`; after a failover the breaker's probe finds the new master. `redis.url` is then optional and"
     " gives only the database. Sentinels without a password only."},
    {"redis.sentinel.addrs", CFG_T_CUSTOM, CFG_REQUIRED, CFG_NONE, 0, 0, NULL, NULL, cfg_sentinel_addrs,
     "1 to 8 \"HOST:PORT\"", NULL},
    {"redis.sentinel.master", CFG_T_STR, CFG_REQUIRED, CFG_AT(redis.master), 0, 0, NULL, NULL, NULL, NULL, NULL},
    {"redis.password_env", CFG_T_ENV, 0, CFG_AT(redis.password), 1, 0, NULL, NULL, NULL, NULL,
     "the environment variable holding Redis's password"},
    {"redis.username", CFG_T_STR, CFG_BYHOOK, CFG_NONE, 0, CFG_NAME_MAX - 1, NULL, NULL, NULL,
     "ACL user, printable ASCII; needs redis.password_env",
     "otpd sends `AUTH username password`"},
    {"redis.timeout_ms", CFG_T_INT, 0, CFG_AT(redis.timeout_ms), 1, 10000, "50", NULL, NULL, NULL,
     "one Redis call"},
    {"redis.breaker_failures", CFG_T_INT, 0, CFG_AT(redis.breaker_failures), 1, 1000, "5", NULL, NULL, NULL,
     "consecutive Redis failures that open the circuit breaker"},
    {"redis.breaker_open", CFG_T_DUR, 0, CFG_AT(redis.breaker_open_ms), 0, 0, "2s", NULL, NULL, NULL,
     "how long the breaker answers 503 at once before a probe"},
    {"ledger", CFG_T_SECTION, CFG_REQUIRED, CFG_NONE, 0, 0, NULL, NULL, NULL, NULL, NULL},
    {"ledger.path", CFG_T_STR, CFG_REQUIRED, CFG_AT(ledger.path), 0, 0, NULL, NULL, NULL, NULL,
     "the SQLite audit ledger"},
    {"ledger.retention", CFG_T_DUR, 0, CFG_AT(ledger.retention_ms), 1000, 0, "90d", NULL, NULL, NULL,
     "rows older than this are pruned (at start, then hourly); messages still queued or sending are kept"},
    {"secret_env", CFG_T_ENV, CFG_REQUIRED, CFG_AT(secret), 32, 0, NULL, NULL, NULL, NULL,
     "the variable holding the key codes are derived from"},
    {"api_keys", CFG_T_CUSTOM, CFG_REQUIRED, CFG_NONE, 0, 0, NULL, NULL, cfg_api_keys, "1 to 256 objects",
     "the callers"},
    {"api_keys.*.name", CFG_T_STR, CFG_BYHOOK | CFG_REQUIRED, CFG_NONE, 0, CFG_NAME_MAX - 1, NULL, NULL, NULL,
     "A-Z, a-z, 0-9, '.', '_', '-'; unique", NULL},
    {"api_keys.*.key_env", CFG_T_ENV, CFG_BYHOOK | CFG_REQUIRED, CFG_NONE, 16, 0, NULL, NULL, NULL, NULL, NULL},
    {"api_keys.*.role", CFG_T_ENUM, CFG_BYHOOK, CFG_NONE, 0, 0, NULL, cfg_role_names, NULL,
     "\"admin\": the admin API only; absent: the OTP API only", NULL},
    {"otp", CFG_T_SECTION, CFG_REQUIRED, CFG_NONE, 0, 0, NULL, NULL, cfg_otp, NULL, NULL},
    {"otp.length", CFG_T_INT, 0, CFG_AT(otp.length), 4, 10, "6", NULL, NULL, NULL,
     "digits of a code"},
    {"otp.ttl", CFG_T_DUR, CFG_RELOAD, CFG_AT(otp.ttl_ms), 10000, 3600000, "5m", NULL, NULL, NULL,
     "a code's life"},
    {"otp.max_attempts", CFG_T_INT, 0, CFG_AT(otp.max_attempts), 1, 100, "5", NULL, NULL, NULL,
     "wrong guesses before a code is dead"},
    {"otp.idempotency_keys", CFG_T_INT, 0, CFG_AT(otp.idem_keys), 1, 10000000, "100000", NULL, NULL, NULL,
     "Idempotency-Keys one caller may hold at once (each kept 24 h, under 1 KB of Redis); "
     "past that, 429 `idempotency_keys`"},
    {"otp.template", CFG_T_STR, CFG_RELOAD, CFG_AT(otp.tmpl), 0, 320,
     "{code} is your login code. It expires in {minutes} minutes.", NULL, NULL, NULL,
     "the SMS text: `{code}`, `{minutes}`"},
    {"phone", CFG_T_SECTION, 0, CFG_NONE, 0, 0, NULL, NULL, NULL, NULL, NULL},
    {"phone.types", CFG_T_CUSTOM, 0, CFG_NONE, 0, 0, NULL, NULL, cfg_phone,
     "libphonenumber's number types; default mobile, fixed_line_or_mobile",
     "number types served; others are 403 `number_type`"},
    {"countries", CFG_T_SECTION, CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, cfg_countries, NULL,
     "by region, before any rule (docs/rules.md)"},
    {"countries.allow", CFG_T_CUSTOM, CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, cfg_countries_allow,
     "region codes (\"IN\", \"001\"); absent: every region", NULL},
    {"countries.deny", CFG_T_CUSTOM, CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, cfg_countries_deny, "region codes", NULL},
    {"countries.monitor", CFG_T_CUSTOM, CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, cfg_countries_monitor,
     "region codes: served, counted and logged", NULL},
    {"pumping", CFG_T_SECTION, CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, cfg_pumping, NULL,
     "the SMS pumping guard; absent: off (docs/rules.md)"},
    {"pumping.prefix_digits", CFG_T_INT, CFG_RELOAD, CFG_AT(limits.pumping.prefix_digits), 3, 15, "7", NULL, NULL, NULL, NULL},
    {"pumping.window", CFG_T_DUR, CFG_RELOAD, CFG_AT(limits.pumping.window_ms), 60000, 7 * 86400000LL, "1h", NULL, NULL,
     NULL, NULL},
    {"pumping.min_sent", CFG_T_INT, CFG_RELOAD, CFG_AT(limits.pumping.min_sent), 1, 1000000, "30", NULL, NULL, NULL, NULL},
    {"pumping.min_verified_ratio", CFG_T_PPM, CFG_RELOAD, CFG_AT(limits.pumping.min_ratio_ppm), 0, 0, "0.2", NULL, NULL,
     NULL, NULL},
    {"pumping.hold", CFG_T_DUR, CFG_RELOAD, CFG_AT(limits.pumping.hold_ms), 1000, CFG_30D_MS, "12h", NULL, NULL, NULL, NULL},
    {"pumping.mode", CFG_T_ENUM, CFG_RELOAD, CFG_AT(limits.pumping.shadow), 0, 0, "enforce", cfg_mode_names, NULL, NULL, NULL},
    {"limits", CFG_T_CUSTOM, CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, cfg_limits,
     "at most 32 rules (docs/rules.md)",
     "the rules (docs/rules.md)"},
    {"limits.*.name", CFG_T_STR, CFG_BYHOOK | CFG_REQUIRED | CFG_RELOAD, CFG_NONE, 0, 32, NULL, NULL, NULL,
     "a-z, 0-9, _; unique", NULL},
    {"limits.*.key", CFG_T_CUSTOM, CFG_BYHOOK | CFG_REQUIRED | CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, NULL,
     "phone, device, client_ip, api_key, global, purpose, phone_prefix:N, region, or a list of 1 to 4", NULL},
    {"limits.*.algorithm", CFG_T_ENUM, CFG_BYHOOK | CFG_REQUIRED | CFG_RELOAD, CFG_NONE, 0, 0, NULL, cfg_algo_names,
     NULL, NULL, NULL},
    {"limits.*.limit", CFG_T_INT, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 1, 1000000000, NULL, NULL, NULL,
     "1 to 1000 (sliding_log, wrong_guess_cap: their memory grows with the limit), 10^6 "
     "(sliding_window_counter), 10^9 (fixed_window; token_bucket: at most one per ms of its window); not for "
     "resend_delay", NULL},
    {"limits.*.window", CFG_T_DUR, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, NULL,
     "at most 30d for sliding_window_counter; not for resend_delay", NULL},
    {"limits.*.burst", CFG_T_INT, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 1, 1000000000, NULL, NULL, NULL,
     "token_bucket only; default its limit", NULL},
    {"limits.*.delay", CFG_T_DUR, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, NULL, "resend_delay only", NULL},
    {"limits.*.mode", CFG_T_ENUM, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 0, 0, "enforce", cfg_mode_names, NULL, NULL, NULL},
    {"limits.*.on", CFG_T_ENUM, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 0, 0, "issue", cfg_on_names, NULL, NULL, NULL},
    {"limits.*.if_store_down", CFG_T_ENUM, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 0, 0, "fail_closed",
     cfg_down_names, NULL, NULL, NULL},
    {"limits.*.local_limit", CFG_T_INT, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 1, 1000000000, NULL, NULL, NULL, NULL, NULL},
    {"limits.*.penalty", CFG_T_SECTION, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, NULL,
     "not for wrong_guess_cap", NULL},
    {"limits.*.penalty.after", CFG_T_INT, CFG_BYHOOK | CFG_REQUIRED | CFG_RELOAD, CFG_NONE, 1, 1000000, NULL, NULL,
     NULL, NULL, NULL},
    {"limits.*.penalty.within", CFG_T_DUR, CFG_BYHOOK | CFG_REQUIRED | CFG_RELOAD, CFG_NONE, 1000, CFG_30D_MS, NULL,
     NULL, NULL, NULL, NULL},
    {"limits.*.penalty.block", CFG_T_DUR, CFG_BYHOOK | CFG_REQUIRED | CFG_RELOAD, CFG_NONE, 1000, CFG_30D_MS, NULL,
     NULL, NULL, NULL, NULL},
    {"cost", CFG_T_SECTION, 0, CFG_NONE, 0, 0, NULL, NULL, cfg_cost, NULL,
     "prices and spend caps"},
    {"cost.currency", CFG_T_STR, CFG_REQUIRED, CFG_AT(limits.currency), 0, 0, NULL, NULL, NULL,
     "ISO 4217: \"INR\", \"USD\"", NULL},
    {"cost.prices", CFG_T_CUSTOM, CFG_REQUIRED | CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, cfg_prices,
     "{\"+PREFIX\" or \"*\": minor units}; a \"*\" with caps", NULL},
    {"cost.caps", CFG_T_CUSTOM, CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, cfg_caps, "at most 8", NULL},
    {"cost.caps.*.window", CFG_T_DUR, CFG_BYHOOK | CFG_REQUIRED | CFG_RELOAD, CFG_NONE, 0, 0, NULL, NULL, NULL,
     NULL, NULL},
    {"cost.caps.*.max", CFG_T_INT, CFG_BYHOOK | CFG_REQUIRED | CFG_RELOAD, CFG_NONE, 0, INT64_MAX / 4, NULL, NULL,
     NULL, "minor units", NULL},
    {"cost.caps.*.key", CFG_T_ENUM, CFG_BYHOOK | CFG_RELOAD, CFG_NONE, 0, 0, NULL, cfg_cap_key_names, NULL,
     "absent: one budget for the fleet", NULL},
    {"refusal_cache", CFG_T_SECTION, 0, CFG_NONE, 0, 0, NULL, NULL, NULL, NULL,
     "refusals that only their own end or an admin change can lift (a sliding log, a fixed window, a resend delay, "
     "a lock, a penalty block), answered from memory until then; never past the real refusal's end (README, "
     "\"The refusal cache\")"},
    {"refusal_cache.max_entries", CFG_T_INT, 0, CFG_AT(limits.refusal_cache.max_entries), 0, 100000000, "1000000", NULL,
     NULL, "0 turns the cache off", "refusals remembered at most, the least recently used dropped first "
     "(about 170 bytes each, up to 370 with long composite keys)"},
    {"pacer", CFG_T_SECTION, 0, CFG_NONE, 0, 0, NULL, NULL, NULL, NULL, NULL},
    {"pacer.rate", CFG_T_INT, 0, CFG_AT(pacer.rate), 1, 10000, "50", NULL, NULL, "sends per second",
     "the fleet's sends per second"},
    {"pacer.capacity", CFG_T_INT, 0, CFG_AT(pacer.capacity), 1, 1000000, "500", NULL, NULL, NULL,
     "messages queued fleet-wide"},
    {"pacer.share_per_key", CFG_T_RATIO, 0, CFG_AT(pacer.share_per_key), 0, 0, "1", NULL, NULL, NULL,
     "the part of capacity one caller may hold"},
    {"pacer.max_inflight", CFG_T_INT, 0, CFG_AT(pacer.max_inflight), 1, 1024, "32", NULL, NULL, NULL,
     "provider calls at once per instance"},
    {"pacer.retry", CFG_T_SECTION, 0, CFG_NONE, 0, 0, NULL, NULL, NULL, NULL, NULL},
    {"pacer.retry.max", CFG_T_INT, 0, CFG_AT(pacer.retry_max), 0, 20, "3", NULL, NULL, NULL,
     "retries after the first attempt"},
    {"pacer.retry.base", CFG_T_DUR, 0, CFG_AT(pacer.retry_base_ms), 0, 0, "500ms", NULL, NULL, NULL,
     "the first backoff, doubled each retry"},
    {"pacer.timeout", CFG_T_DUR, 0, CFG_AT(pacer.timeout_ms), 0, 0, "10s", NULL, NULL, NULL,
     "one provider call, connect included"},
    {"pacer.takeover", CFG_T_DUR, 0, CFG_AT(pacer.takeover_ms), 1000, 600000, "10s", NULL, NULL, NULL,
     "a message claimed by an instance that has not touched its claims for this long is taken over by another"},
    {"pacer.instance", CFG_T_STR, 0, CFG_AT(pacer.instance), 0, 0, NULL, NULL, NULL,
     "default HOSTNAME:PORT",
     "this instance's name in the fleet's consumer group: unique per live instance, the same across its "
     "restarts (a restart takes its own messages back at once)"},
    {"pacer.on_restart_sending", CFG_T_ENUM, 0, CFG_AT(pacer.on_restart_sending), 0, 0, "resend",
     cfg_sending_names, NULL, NULL,
     "a message taken back after a crash (by its instance's restart or a takeover) while it was `sending`:"
     " `resend` (at least once; duplicates at most the dead instance's `max_inflight`) or `fail`"},
    {"provider", CFG_T_SECTION, CFG_REQUIRED, CFG_NONE, 0, 0, NULL, NULL, cfg_provider, NULL, NULL},
    {"provider.type", CFG_T_ENUM, CFG_REQUIRED, CFG_AT(provider.type), 0, 0, NULL, cfg_provider_names, NULL, NULL,
     "the SMS provider's adapter"},
    {"provider.path", CFG_T_STR, 0, CFG_AT(provider.path), 0, 0, NULL, NULL, NULL, "file: required", NULL},
    {"provider.url", CFG_T_STR, 0, CFG_AT(provider.url), 0, 0, NULL, NULL, NULL,
     "webhook, kannel: required, http(s)://", NULL},
    {"provider.from", CFG_T_STR, 0, CFG_AT(provider.from), 0, 0, NULL, NULL, NULL,
     "kannel: required; twilio: this or messaging_service_sid", NULL},
    {"provider.base_url", CFG_T_STR, 0, CFG_AT(provider.base_url), 0, 0, "https://api.twilio.com", NULL, NULL,
     "twilio", NULL},
    {"provider.username_env", CFG_T_ENV, CFG_BYHOOK, CFG_NONE, 1, 0, NULL, NULL, NULL, "kannel: required", NULL},
    {"provider.password_env", CFG_T_ENV, CFG_BYHOOK, CFG_NONE, 1, 0, NULL, NULL, NULL, "kannel: required", NULL},
    {"provider.smsc", CFG_T_STR, 0, CFG_AT(provider.smsc), 0, 63, NULL, NULL, NULL,
     "kannel: an smsc-id, no spaces or ';'", "sendsms `smsc`: the SMSC Kannel routes through (absent: Kannel's routing)"},
    {"provider.priority", CFG_T_INT, CFG_BYHOOK, CFG_NONE, 0, 3, NULL, NULL, NULL, "kannel",
     "sendsms `priority` (absent: not sent)"},
    {"provider.validity", CFG_T_DUR, CFG_BYHOOK, CFG_NONE, 60000, 86400000, NULL, NULL, NULL,
     "kannel: whole minutes",
     "sendsms `validity`, in minutes (absent: each code's remaining life, rounded up)"},
    {"provider.dlr_mask", CFG_T_INT, 0, CFG_AT(provider.dlr_mask), 1, 31, "19", NULL, NULL,
     "kannel: needs callback_url",
     "sendsms `dlr-mask`: the report types asked for (19: delivered, undelivered, SMSC reject)"},
    {"provider.account_sid_env", CFG_T_ENV, CFG_BYHOOK, CFG_NONE, 1, 0, NULL, NULL, NULL,
     "twilio: required; AC and 32 hex digits", NULL},
    {"provider.auth_token_env", CFG_T_ENV, CFG_BYHOOK, CFG_NONE, 1, 0, NULL, NULL, NULL,
     "twilio: this or the API key; with an API key, only with callback_url",
     "basic auth with the account SID, and the key of status callbacks' X-Twilio-Signature"},
    {"provider.api_key_sid_env", CFG_T_ENV, CFG_BYHOOK, CFG_NONE, 1, 0, NULL, NULL, NULL,
     "twilio: SK and 32 hex digits; with api_key_secret_env", "basic auth with an API key instead of the auth token"},
    {"provider.api_key_secret_env", CFG_T_ENV, CFG_BYHOOK, CFG_NONE, 1, 0, NULL, NULL, NULL,
     "twilio: with api_key_sid_env", NULL},
    {"provider.messaging_service_sid", CFG_T_STR, 0, CFG_AT(provider.messaging_service), 0, 0, NULL, NULL, NULL,
     "twilio: MG and 32 hex digits; this or from", "sent as `MessagingServiceSid` instead of `From`"},
    {"provider.token_env", CFG_T_ENV, CFG_BYHOOK, CFG_NONE, 16, 0, NULL, NULL, NULL, "webhook",
     "sent as `Authorization: Bearer <token>`"},
    {"provider.signing_secret_env", CFG_T_ENV, CFG_BYHOOK, CFG_NONE, 32, 0, NULL, NULL, NULL, "webhook",
     "signs each request: `X-Otpd-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of \"t.body\">`"},
    {"provider.callback_url", CFG_T_STR, 0, CFG_AT(provider.callback_url), 0, 0, NULL, NULL, NULL,
     "otpd's own base URL for delivery reports",
     "with it Kannel and Twilio send delivery reports to `/v1/dlr/kannel` and `/v1/dlr/twilio` (see "
     "\"Delivery reports\")"},
    {"provider.callback_ttl", CFG_T_DUR, 0, CFG_AT(provider.callback_ttl_ms), 1000, CFG_30D_MS, "7d", NULL, NULL, NULL,
     "how long a report URL is accepted after its message was accepted"},
};
const size_t cfg_n_rows = sizeof(cfg_rows) / sizeof(cfg_rows[0]);
