/*
 * config: the one JSON file of otpd (DESIGN.md, "Configuration"), loaded and
 * validated whole at start-up and on SIGHUP. Secrets are read from the
 * environment variables the file names; they live only in this struct.
 */
#ifndef OTPD_CONFIG_H
#define OTPD_CONFIG_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#define CFG_NAME_MAX 33 /* rule and API key names: 32 bytes and NUL */
#define CFG_STR_MAX 512 /* URLs, paths, templates */
#define CFG_SENTINELS_MAX 8
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

struct cfg_api_key {
    char name[CFG_NAME_MAX];
    char *key; /* the secret value, from the environment */
    int admin; /* api_keys[].role "admin": only the /v1/admin routes; else only the OTP routes */
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

/* pumping: the guard against SMS pumping (DESIGN.md, "Fraud"); off when
 * the key is absent. */
struct cfg_pumping {
    int on;                 /* 0: the guard is off */
    int prefix_digits;      /* digits after the '+' naming a prefix, 3 to 15 */
    int64_t window_ms;      /* the sliding window sent and verified are counted over */
    int64_t min_sent;       /* sends in the window before the ratio is judged */
    int64_t min_ratio_ppm;  /* min_verified_ratio in millionths, 1 to 1,000,000 */
    int64_t hold_ms;        /* how long a prefix is held once judged */
    int shadow;             /* 1: count and log holds, refuse nothing */
};

/* pacer: the send queue's section (DESIGN.md, "Pacer"); src/pacer reads
 * only this. */
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
    char from[64];
    char *user;                 /* kannel username or twilio account SID */
    char *pass;                 /* kannel password or twilio auth token */
    char callback_url[CFG_STR_MAX]; /* otpd's own base URL for delivery reports; "" = none */
    int64_t callback_ttl_ms;        /* how long a report URL is accepted after the message was accepted */
};

/* refusal_cache: the refusal cache (src/limits/rcache.h, issue 13). */
struct rcache_conf {
    int64_t max_entries; /* 0: off; else at most this many refusals remembered (LRU) */
};

struct config {
    char listen_host[64];
    int listen_port;
    int http_threads;
    int http_max_conns_per_ip;       /* http.max_conns_per_ip, at least 1,024 */
    int64_t http_request_timeout_ms; /* http.request_timeout: a request arrives whole by then */

    char redis_host[256]; /* from redis.url; unused when sentinels are set */
    int redis_port;
    char redis_sentinel_hosts[CFG_SENTINELS_MAX][256]; /* redis.sentinel.addrs */
    int redis_sentinel_ports[CFG_SENTINELS_MAX];
    size_t n_sentinels;            /* 0: a single node at redis_host */
    char redis_master[CFG_NAME_MAX]; /* redis.sentinel.master */
    int redis_db;
    char *redis_password; /* NULL when none */
    char redis_username[CFG_NAME_MAX]; /* redis.username (ACL AUTH); "" for the default user */
    int redis_timeout_ms;
    int breaker_failures;     /* consecutive failures that open the breaker */
    int64_t breaker_open_ms;  /* how long it stays open before a probe */

    char ledger_path[CFG_STR_MAX];
    int64_t ledger_retention_ms; /* ledger.retention: older rows are pruned */

    unsigned char *secret; /* from secret_env, at least 32 bytes */
    size_t secret_len;

    struct cfg_api_key *api_keys;
    size_t n_api_keys;

    int otp_length;        /* digits, 4 to 10 */
    int64_t otp_ttl_ms;
    int otp_max_attempts;
    char otp_template[CFG_STR_MAX];

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

    struct pacer_conf pacer;
    struct rcache_conf refusal_cache;

    struct provider_conf provider;
    int log_format;                 /* enum log_format: text (default) or json; a restart changes it */
    int log_level;                  /* enum log_level: the lowest printed (default info); SIGHUP changes it */

    void *json; /* the parsed file (a jansson json_t), for config_diff */
};

/*
 * Loads and validates path. Returns a config the caller frees with
 * config_free, or NULL; then *errors (if errors is not NULL) is a malloc'd
 * text, one "FILE: path.to.key: what is wrong" line per problem, that the
 * caller frees.
 */
struct config *config_load(const char *path, char **errors);

/* Same as config_load, from a string; file is only used in messages. */
struct config *config_parse(const char *text, const char *file, char **errors);

void config_free(struct config *c);

/* Wipes every secret variable a config_load read from the environment, in
 * place, and unsets it; later loads (SIGHUP) still see the values. -1 when
 * out of memory (that variable is left as it was). */
int config_scrub_env(void);

/* Makes the loader allocate through fn (NULL: malloc again); what fn returns
 * must be released by free(). For tests that make one allocation fail: every
 * failure is then a load error, never a config with something missing. Not
 * thread-safe; set it before loading. */
void config_set_alloc(void *(*fn)(size_t));

/* read 0: later loads check that each secret's variable is named but read
 * no value, leaving secret, api_keys[].key, redis_password and the
 * provider's credentials NULL. For tools that replay rules and need no
 * secret (otpctl simulate); otpd never calls it. Not thread-safe. */
void config_set_secrets(int read);

/* The price of one SMS to phone: the longest matching prefix, else "*",
 * else -1 when no price applies (no cost block). */
int64_t config_price(const struct config *c, const char *phone);

/* The same over a price list (n entries). */
int64_t config_price_in(const struct cfg_price *prices, size_t n, const char *phone);

/*
 * What SIGHUP does with a changed key. config_diff calls fn once per key
 * (dotted path, as in the file) whose value differs between old and new,
 * with reload 1 when a reload applies it and 0 when it needs a restart.
 * Returns how many keys changed.
 */
size_t config_diff(const struct config *old, const struct config *new_cfg,
                   void (*fn)(void *ctx, const char *path, int reload), void *ctx);

/* Prints the key table (Markdown, one row per key: type, default, bounds,
 * reload) to f, as README's "Configuration keys" holds it. */
void config_print_table(FILE *f);

const char *config_key_name(enum cfg_key k);
const char *config_algo_name(enum cfg_algo a);

/* The largest limit a rule of algorithm a may take: a sliding log is
 * bounded by its memory, the counter by its exact integer arithmetic.
 * Config and admin overrides share it. */
int64_t config_limit_max(enum cfg_algo a);

#endif
