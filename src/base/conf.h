/*
 * conf: the config's sections (docs/architecture.md, "Configuration"), one
 * struct per module, and the types they hold. A module includes this and
 * takes its own section (the pacer struct pacer_conf, the limits struct
 * limits_conf); only cmd/ and src/base/config*.c see the whole struct
 * config (config.h), which is these sections side by side. The loader fills
 * them from the key table; the functions below live in config_cost.c (the
 * price) and config_rules.c (the rest).
 */
#ifndef OTPD_CONF_H
#define OTPD_CONF_H

#include <stddef.h>
#include <stdint.h>

#include "route.h"

#define CFG_NAME_MAX 33 /* rule and API key names: 32 bytes and NUL */
#define CFG_STR_MAX 512 /* URLs, paths, templates */
#define CFG_SENTINELS_MAX 8
#define CFG_SID_LEN 34 /* a Twilio SID: two letters naming its kind and 32 hex digits */
#define CFG_TEXT_MAX 479 /* bytes of one rendered message (the pacer holds 480 with the NUL) */

/* A rule's key kinds, in the order a composite key joins them. */
enum cfg_key {
    CFG_KEY_PHONE,
    CFG_KEY_DEVICE,
    CFG_KEY_CLIENT_IP,
    CFG_KEY_API_KEY,
    CFG_KEY_GLOBAL,
    CFG_KEY_PURPOSE,
    CFG_KEY_PHONE_PREFIX, /* the first prefix_digits digits after the '+' */
    CFG_KEY_REGION,       /* libphonenumber's region code */
};
#define CFG_KEY_COUNT 8

/* When a rule is checked and taken. */
enum cfg_on { CFG_ON_ISSUE, CFG_ON_VERIFY, CFG_ON_BOTH };

enum cfg_algo {
    CFG_ALGO_SLIDING_LOG,
    CFG_ALGO_FIXED_WINDOW,
    CFG_ALGO_TOKEN_BUCKET,
    CFG_ALGO_RESEND_DELAY,
    CFG_ALGO_WRONG_GUESS_CAP,
    CFG_ALGO_SLIDING_WINDOW_COUNTER, /* two Unix-aligned counters, the previous one weighted */
};

enum cfg_provider { CFG_PROVIDER_FILE, CFG_PROVIDER_WEBHOOK, CFG_PROVIDER_KANNEL, CFG_PROVIDER_TWILIO };

/* What to do with messages found in 'sending' after a crash. */
enum cfg_sending { CFG_SENDING_RESEND, CFG_SENDING_FAIL };

#define CFG_ORIGIN_MAX 253 /* a host name */

/* otp.templates: the template of one locale ("en", "pt-BR"). */
#define CFG_TEMPLATES_MAX 32
#define CFG_LOCALE_MAX 16
struct cfg_template {
    char locale[CFG_LOCALE_MAX + 1];
    char tmpl[CFG_STR_MAX];
};

/* api_keys[].twilio.api_keys: an API key of the caller's Twilio account. */
struct cfg_tw_key {
    char sid[CFG_SID_LEN + 1]; /* "SK..." */
    char *secret;              /* from the environment */
};
#define CFG_TW_KEYS_MAX 8

struct cfg_api_key {
    char name[CFG_NAME_MAX];
    char *key; /* the secret value, from the environment */
    int admin; /* api_keys[].role "admin": only the /v1/admin routes; else only the OTP routes */
    /* api_keys[].twilio: the caller's account on /v2 (docs/twilio-verify.md);
     * "" when it has none. Basic auth with it and key, or with one of
     * tw_keys and its secret, is this caller on /v2 only. */
    char tw_account[CFG_SID_LEN + 1];
    struct cfg_tw_key tw_keys[CFG_TW_KEYS_MAX];
    size_t n_tw_keys;
    /* api_keys[].webotp_origin: a host name; its messages end with the
     * origin-bound line "@<origin> #<code>" (WebOTP, iOS autofill). "": none. */
    char webotp_origin[CFG_ORIGIN_MAX + 1];
};

struct cfg_rule {
    char name[CFG_NAME_MAX];
    char field[3]; /* the rule's field in its Redis hash: 2 characters from a hash of the name alone,
                    * so every active phone's state stays small and a reload never moves it */
    enum cfg_key key;       /* the first kind of key_mask: names the Redis key the state lives in */
    unsigned key_mask;      /* every kind of the (composite) key, bit 1 << kind; the others name the field */
    int prefix_digits;      /* phone_prefix:N, 1 to 15; 0 when the key has no phone_prefix */
    enum cfg_on on;
    enum cfg_algo algo;
    int64_t limit;     /* events per window; 1 for resend_delay */
    int64_t window_ms; /* window, or the delay for resend_delay */
    int64_t burst;     /* token_bucket only: events at once; defaults to limit */
    int shadow;        /* 1: count and log would-be refusals, block nothing */
    /* penalty: a key refused by this (enforced) rule penalty_after times
     * within penalty_within_ms is refused outright for penalty_block_ms.
     * penalty_after is 0 when the rule has none. */
    int64_t penalty_after;     /* 1 to 10^6 */
    int64_t penalty_within_ms; /* 1 s to 30 d */
    int64_t penalty_block_ms;  /* 1 s to 30 d */
    int local_fallback;     /* 1: when Redis is down, enforce local_limit here */
    int64_t local_limit;    /* this instance's share of limit, per window */
};

struct cfg_price {
    char prefix[17]; /* "+91", or "*" for every other destination */
    int64_t price_minor;
};

struct cfg_cap {
    int64_t window_ms; /* fixed window aligned to Unix time */
    int64_t max_minor;
    int per_key;       /* "key": "api_key": each caller has its own sum, under the global caps */
};

/* countries: region codes as libphonenumber gives them ("IN", "001"),
 * each checked against its list and listed at most once per list. */
#define CFG_REGIONS_MAX 300
#define CFG_REGION_LEN 4
struct cfg_countries {
    int has_allow; /* 1: only the allow list's regions are served */
    size_t n_allow, n_deny, n_monitor;
    char allow[CFG_REGIONS_MAX][CFG_REGION_LEN];
    char deny[CFG_REGIONS_MAX][CFG_REGION_LEN];
    char monitor[CFG_REGIONS_MAX][CFG_REGION_LEN]; /* served, but counted and logged */
};

/* pumping: the guard against SMS pumping (docs/architecture.md, "Limits
 * and rules"); off when the key is absent. */
struct cfg_pumping {
    int on;                 /* 0: the guard is off */
    int prefix_digits;      /* digits after the '+' naming a prefix, 3 to 15 */
    int64_t window_ms;      /* the sliding window sent and verified are counted over */
    int64_t min_sent;       /* sends in the window before the ratio is judged */
    int64_t min_ratio_ppm;  /* min_verified_ratio in millionths, 1 to 1,000,000 */
    int64_t hold_ms;        /* how long a prefix is held once judged */
    int shadow;             /* 1: count and log holds, refuse nothing */
};

/* pacer: the send queue's section (docs/architecture.md, "The pacer and
 * the fleet"); src/pacer reads only this. */
struct pacer_conf {
    int rate;               /* sends per second, 1 to 10000 */
    int capacity;           /* queued messages, fleet-wide */
    double share_per_key;   /* the part of capacity one caller may hold, (0, 1] */
    int max_inflight;       /* provider calls at once */
    int retry_max;          /* retries after the first attempt */
    int64_t retry_base_ms;
    int64_t timeout_ms;     /* one provider call */
    int64_t takeover_ms;    /* a message claimed by a silent instance is taken over after this */
    /* This instance's name in the fleet's consumer group; "" for
     * "<hostname>:<listen port>". Unique per live instance, stable across
     * its restarts (a restart takes its own messages back at once). */
    char instance[CFG_NAME_MAX];
    enum cfg_sending on_restart_sending;
};

/* The provider section (provider.*): all src/provider and the delivery
 * reports read of the config. */
struct provider_conf {
    enum cfg_provider type;
    char url[CFG_STR_MAX];      /* kannel, webhook */
    char base_url[CFG_STR_MAX]; /* twilio */
    char path[CFG_STR_MAX];     /* file */
    char from[64];              /* kannel; twilio unless messaging_service is set */
    char *user;                 /* kannel username or twilio account SID (AC + 32 hex: the Messages URL's) */
    char *pass;                 /* kannel password or twilio auth token (NULL with an API key and no
                                 * callback_url); the token also checks X-Twilio-Signature */
    char *key_sid;              /* twilio: API key SID (SK + 32 hex), the basic-auth user instead of the
                                 * account SID; NULL: the auth token authenticates */
    char *key_secret;           /* twilio: the API key's secret, with key_sid */
    char messaging_service[CFG_SID_LEN + 1]; /* twilio: MG + 32 hex, sent as MessagingServiceSid
                                              * instead of From; "" = From */
    char *token;                /* webhook: sent as Authorization: Bearer; NULL = none */
    char *signing_secret;       /* webhook: signs each body (X-Otpd-Signature); NULL = unsigned */
    char smsc[64];              /* kannel: the smsc-id to route by; "" = Kannel's own routing */
    int priority;               /* kannel: 0 to 3; -1 = not sent */
    int64_t validity_ms;        /* kannel: whole minutes; 0 = each code's remaining life */
    int dlr_mask;               /* kannel: report types asked for, 1 to 31 (default 19) */
    char callback_url[CFG_STR_MAX]; /* otpd's own base URL for delivery reports; "" = none */
    int64_t callback_ttl_ms;        /* how long a report URL is accepted after the message was accepted */
};

/* One provider of the network (providers.<name>, or the single provider
 * section as the lane "default"): its adapter, its own pacing (rate,
 * capacity, in flight, retries, timeout: struct pacer_conf, the fleet-wide
 * keys takeover, instance, share_per_key and on_restart_sending from
 * pacer.*), its own prices (NULL: cost.prices) and its breaker. */
#define CFG_LANES_MAX 8
#define CFG_LANE_DEFAULT "default" /* the single provider's lane: its queue keys are otpd's first ones */
struct lane_conf {
    char name[ROUTE_NAME_MAX];
    struct provider_conf provider;
    struct pacer_conf pacer;
    struct cfg_price *prices; /* NULL: cost.prices */
    size_t n_prices;
    int breaker_failures;     /* consecutive failed calls (transport, timeout, 5xx) that open it */
    int64_t breaker_open_ms;  /* how long it stays open before one probe */
};

/* providers, routes and failover: what src/pacer's lanes read. */
struct network_conf {
    struct lane_conf lanes[CFG_LANES_MAX];
    size_t n_lanes;           /* at least 1 */
    struct route routes[ROUTES_MAX];
    size_t n_routes;          /* at least 1; the single provider's is "*" */
    int max_providers;        /* failover.max_providers: providers one message may go to */
    double report_min_life;   /* failover.report_min_life: the part of a code's life that must be left for a
                               * failed delivery report to send it again on the next provider */
    int named;                /* 1: from providers (the file names them); 0: the single provider section */
};

/* tls: HTTPS on listen (docs/operations.md, "TLS and private probes"); src/http/tls.c reads only this. The
 * files are read at start-up and again on each SIGHUP, never here. */
struct tls_conf {
    int on;                 /* 1: the tls section is present (a change needs a restart) */
    char cert[CFG_STR_MAX]; /* PEM: the certificate, then its intermediates */
    char key[CFG_STR_MAX];  /* PEM: its private key, unencrypted; the file's content is a secret */
};

/* The API's listeners and their caps (listen, listen_internal,
 * http_threads, http.*): what src/http reads, with struct keys_conf and
 * (through src/http/tls.c) struct tls_conf. */
struct http_conf {
    char listen_host[64];
    int listen_port;
    /* listen_internal: a second, plain listener that alone serves /healthz,
     * /readyz and /metrics; "" and 0 when none. */
    char listen_internal_host[64];
    int listen_internal_port;
    int threads;               /* http_threads */
    int max_conns_per_ip;      /* http.max_conns_per_ip, at least 1,024 */
    int64_t request_timeout_ms; /* http.request_timeout: a request arrives whole by then */
};

/* redis.*: cmd/otpd builds the store's options from it. */
struct redis_conf {
    char host[256]; /* from redis.url; unused when sentinels are set */
    int port;
    char sentinel_hosts[CFG_SENTINELS_MAX][256]; /* redis.sentinel.addrs */
    int sentinel_ports[CFG_SENTINELS_MAX];
    size_t n_sentinels;       /* 0: a single node at host */
    char master[CFG_NAME_MAX]; /* redis.sentinel.master */
    int db;
    char *password;            /* NULL when none; owned by the config */
    char username[CFG_NAME_MAX]; /* redis.username (ACL AUTH); "" for the default user */
    int timeout_ms;
    int breaker_failures;      /* consecutive failures that open the breaker */
    int64_t breaker_open_ms;   /* how long it stays open before a probe */
};

/* ledger.* */
struct ledger_conf {
    char path[CFG_STR_MAX];
    int64_t retention_ms; /* ledger.retention: older rows are pruned */
};

/* api_keys: the callers. src/http checks a presented key against them;
 * src/otp names each caller's own cost caps. The keys' values are
 * secrets the config owns. */
struct keys_conf {
    struct cfg_api_key *api_keys;
    size_t n_api_keys;
};

/* otp.*: what src/otp reads of the codes. */
struct otp_conf {
    int length;          /* digits, 4 to 10 */
    int64_t ttl_ms;
    int max_attempts;
    char tmpl[CFG_STR_MAX]; /* otp.template: the default */
    struct cfg_template templates[CFG_TEMPLATES_MAX]; /* otp.templates, by locale */
    size_t n_templates;
    int idem_keys;          /* otp.idempotency_keys: Idempotency-Keys one caller may hold at once */
};

/* The rules and what is decided beside them: the cost (prices, caps,
 * currency) and the gates before any rule (phone.types, countries,
 * pumping). src/limits and src/admin read it; src/otp takes its rule
 * names, caps, currency and phone.types. Arrays are owned by the config;
 * limits_new and admin_new copy them. */
/* refusal_cache: the refusal cache (src/limits/rcache.h, issue 13); a
 * restart applies it. */
struct rcache_conf {
    int64_t max_entries; /* 0: off; else at most this many refusals remembered (LRU) */
};

struct limits_conf {
    unsigned phone_types; /* phone.types: the number types served, PHONE_TYPE_BIT each (phone.h) */
    struct cfg_countries countries; /* countries: allow, deny, monitor */
    struct cfg_pumping pumping;

    struct cfg_rule *rules;
    size_t n_rules;

    char currency[8];
    struct cfg_price *prices;
    size_t n_prices;
    struct cfg_cap *caps;
    size_t n_caps;

    struct rcache_conf refusal_cache;
};

/* log.*: cmd/otpd hands them to log_setup. */
struct log_conf {
    int format; /* enum log_format: text (default) or json; a restart changes it */
    int level;  /* enum log_level: the lowest printed (default info); SIGHUP changes it */
};

/* The price of one SMS to phone over a price list (n entries): the longest
 * matching prefix, else "*", else -1 when no price applies (no cost block). */
int64_t config_price_in(const struct cfg_price *prices, size_t n, const char *phone);

const char *config_key_name(enum cfg_key k);
const char *config_algo_name(enum cfg_algo a);

/* The largest limit a rule of algorithm a may take: a sliding log and a
 * wrong-guess cap (a log of guesses) are bounded by their memory, the
 * counter by its exact integer arithmetic.
 * Config and admin overrides share it. */
int64_t config_limit_max(enum cfg_algo a);

/* The bytes a template's {name} may take: a Verify service's name, 32
 * characters of UTF-8. */
#define CFG_MSG_NAME_MAX 128
/* The longest text tmpl can render to with digits-digit codes: every
 * {code} as digits digits, every {minutes} as "60" (otp.ttl is at most
 * an hour) and every {name} as CFG_MSG_NAME_MAX bytes. Config checks and each issue's (src/otp/sms.c) share it. */
size_t config_rendered_max(const char *tmpl, int digits);
/* The bytes of the origin-bound line ("\n@<origin> #<code>") a message
 * ends with; 0 for origin "". */
size_t config_origin_line(const char *origin, int digits);

/* Why limit cannot be the limit of a rule of algorithm a over window_ms,
 * when it is within 1 and config_limit_max(a) yet still does not fit (a
 * static sentence, to follow "must be ..."); NULL when it fits. A log
 * (sliding_log, wrong_guess_cap) beyond its bound, and a token bucket that would space requests less
 * than 1 ms apart (issue.lua's step is whole ms), are refused, each with a
 * kind that holds such a limit. Config and admin overrides share it. */
const char *config_limit_why(enum cfg_algo a, int64_t window_ms, int64_t limit);

#endif
