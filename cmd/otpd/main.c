/*
 * otpd: flags, wiring and signals. Builds every module from the config,
 * puts the ledger's unfinished messages back in the queue, serves until
 * SIGTERM or SIGINT, and reloads the limits on SIGHUP. The only place
 * that logs fatal errors and exits.
 *
 * Threads. libmicrohttpd's pool serves requests (each Redis call through
 * the store's pool, each ledger write through the ledger's writer thread).
 * The main thread waits for signals and, once a second, runs the abandons
 * of requests answered 503 (limits_flush) and drops the fleet's lapsed
 * holds (limits_holds): Redis calls with the store's timeout. On the same
 * tick it refreshes the admin rows (admin_refresh: one small script call,
 * the rows themselves only when their change counter moved) and hands
 * the live overrides to the limits, so an admin change or expiry reaches
 * this instance within about a second, two at most. What this instance
 * remembers (the refusal cache, the snapshot's blocks) answers only while
 * that read succeeded less than 2 s ago (src/base/fresh.h): cut off from
 * Redis, it answers 503 rather than contradict a change it cannot see.
 * The admin's mu guards its snapshot (workers take a reference to match
 * blocks) and is never held across a Redis or ledger call. The pacer runs
 * two threads: the queue thread makes every Redis call of the send
 * queue (claims, takeovers, cost reservations and refunds, slots, ends),
 * and the sender owns the wire (curl multi) and waits on nothing but its
 * slots' times and curl. Locks: the pacer's mu (its lists) and wmu (the
 * queue thread's wake-up) never nest; the store, ledger, limits and otp
 * each guard their own state and hold no lock across a call into another
 * module. The limits' refusal cache (src/limits/rcache.h) has 16 shard
 * mutexes, each held for one lookup, insert or clear and never with another;
 * the tick also adds the penalty hits it answered to Redis
 * (limits_penalties_flush) and clears it when the admin counter moved.
 * Last on the tick, the ledger's sweep (src/ledger/sweep.h) ends the
 * messages this instance accepted and another one sent: one read of the
 * ledger's readers' connection, and at most one call on the pacer's store,
 * none for a while after one failed.
 *
 * HTTP. With listen_internal set, a second libmicrohttpd daemon (one
 * thread) serves the probes and metrics; both share http's deadline reaper
 * thread and its mu (the open connections). Each daemon is fed by an
 * accepting thread of ours (src/http/listener.h), started only once both
 * daemons exist, since a request on either is routed by whether the
 * internal one does. The summary of flooding 401/403/404 lines
 * (src/http/logsum.h) has its own mutex, a leaf: workers count under it,
 * and the reaper collects under it and logs outside it, never with mu. With tls, the certificate
 * lives in src/http/tls.c under its own mutex: MHD's workers take it for a
 * pointer read at each handshake, the main thread to swap a new one in on
 * SIGHUP, and the reaper to free replaced ones once no connection opened
 * before the swap remains. The reaper releases http's mu before it takes
 * the certificate's, so the two never nest.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <time.h>

#include "../../src/admin/admin.h"
#include "../../src/base/clock.h"
#include "../../src/base/config.h"
#include "../../src/base/log.h"
#include "../../src/base/timestamp.h"
#include "../../src/http/http.h"
#include "../../src/http/tls.h"
#include "../../src/ledger/ledger.h"
#include "../../src/ledger/sweep.h"
#include "../../src/limits/limits.h"
#include "../../src/otp/code.h"
#include "../../src/otp/otp.h"
#include "../../src/pacer/lanes.h"
#include "../../src/pacer/pacer.h"
#include "../../src/provider/provider.h"
#include "../../src/store/store.h"
#include "../../src/v2/v2.h"

/* How often (ticks, seconds) the queues of providers no longer configured are looked at. */
#define OTPD_ADOPT_TICKS 10
/* How long SIGTERM waits for provider calls in flight. */
#define OTPD_DRAIN_MS 5000

static void usage(FILE *f)
{
    fprintf(f, "usage: otpd -c FILE          run the service\n"
                    "       otpd --check -c FILE  validate FILE (no secret needed) and exit 0, or 1 with every error\n"
                    "       otpd --version        print the version (git describe at build) and exit\n"
                    "       otpd --print-config-table  print every config key (docs/config.md's table) and exit\n"
                    "       otpd --help           print this and exit\n"
                    "signals: SIGHUP reloads the file (what can change without a restart), SIGTERM stops\n");
}

/* Everything otpd runs; torn down in reverse order. */
struct otpd {
    struct config *cfg;     /* the config at start: every module's settings that need a restart */
    struct config *applied; /* the last file a SIGHUP applied (NULL: cfg); its reloadable keys are in force */
    struct code_keys *keys;
    struct store *store;
    struct store *pacer_store; /* the pacer's own pool and breaker: its polling never trips the API's */
    struct limits *limits;
    struct limits_money *money;
    struct admin *admin;
    struct ledger *ledger;
    struct lanes *lanes; /* one pacer and adapter per provider */
    struct otp *otp;
    struct v2 *v2; /* the Twilio Verify surface's records */
    struct tls *tls; /* tls: the certificate HTTPS serves; NULL for plain HTTP */
    struct http *http;
    struct sweep sweep; /* the tick's */
    int tick_down;      /* the tick could not reach Redis at its last try: said once, until it can again */
    unsigned ticks;
};

static void otpd_free(struct otpd *d)
{
    http_free(d->http);
    tls_free(d->tls);
    if (d->lanes)
        lanes_stop(d->lanes, OTPD_DRAIN_MS);
    lanes_free(d->lanes);
    otp_free(d->otp);
    v2_free(d->v2);
    admin_free(d->admin);
    ledger_close(d->ledger);
    limits_money_free(d->money);
    limits_free(d->limits);
    store_free(d->pacer_store);
    store_free(d->store);
    code_keys_free(d->keys);
    config_free(d->applied);
    config_free(d->cfg);
}

/* The pacer's cost hooks (struct pacer_money), on its money thread. */
static enum otp_rc otpd_reserve(void *ctx, const char *id, const char *owner, int need, enum pacer_use use,
                                int64_t price_minor, int64_t issue_ms, int *ok, int *idx, int64_t *at_ms, char *why,
                                size_t why_cap, char *err)
{
    static const enum limits_use uses[] = {[PACER_RESERVE] = LIMITS_RESERVE, [PACER_USE] = LIMITS_USE,
                                           [PACER_RESTORE] = LIMITS_RESTORE, [PACER_UNUSE] = LIMITS_UNUSE};
    struct limits_grant g;
    enum otp_rc rc = limits_reserve(ctx, id, owner, need, uses[use], price_minor, issue_ms, &g, err);

    if (rc != OTP_OK)
        return rc;
    *ok = g.ok;
    *idx = g.idx;
    *at_ms = g.at_ms;
    if (!g.ok)
        snprintf(why, why_cap, "no room in the %llds cap for %llds", (long long)(g.cap_window_ms / 1000),
                 (long long)((g.retry_ms + 999) / 1000));
    return OTP_OK;
}

static enum otp_rc otpd_refund(void *ctx, const char *id, const char *owner, int idx, int64_t price_minor,
                               int64_t cost_ms, const char *cost_caps, int *result, char *err)
{
    int anomalies = 0;
    enum otp_rc rc =
        limits_refund_once(ctx, id, owner, idx, price_minor, cost_ms, cost_caps, result, &anomalies, err);

    if (rc == OTP_OK && anomalies > 0) {
        /* A cap window holds less than this refund: money given back twice,
         * or never taken. Left as it is, and counted as an anomaly. */
        log_msg(LOG_ERROR, "cost refund anomaly: message %s, %d cap windows below its price", id, anomalies);
        *result = -1;
    }
    return rc;
}

/*
 * Before anything is opened: files otpd creates (the ledger, its WAL and
 * SHM, the file provider's sink) are the owner's alone; no core dump can
 * carry a code or a key (RLIMIT_CORE 0, and not dumpable, which also keeps
 * ptrace and other users' /proc reads out); descriptors up to the hard
 * limit, so many clients cannot exhaust them.
 */
static void otpd_harden(void)
{
    struct rlimit rl = {0, 0};

    umask(077);
    if (setrlimit(RLIMIT_CORE, &rl) != 0)
        log_msg(LOG_WARN, "cannot set RLIMIT_CORE to 0");
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
        log_msg(LOG_WARN, "cannot clear the dumpable flag");
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            log_msg(LOG_WARN, "cannot raise RLIMIT_NOFILE to its hard limit");
    }
}

/* The sweep's read of the fleet's record (sweep_read_fn): the pacer's. */
static enum otp_rc otpd_fleet_states(void *ctx, const char *const *ids, int n,
                                     void (*put)(void *put_ctx, int i, enum msg_state state, const char *detail),
                                     void *put_ctx, char *err)
{
    return pacer_states(ctx, ids, n, put, put_ctx, err);
}

/* The housekeeping tick's admin part: the rows' snapshot, the live
 * overrides into the limits when they changed, and last what vouches for
 * the refusal cache: the read just made, once what it saw is applied, or
 * its failure (a change made on another instance may be unseen: nothing
 * is answered from memory then). */
static enum otp_rc otpd_admin_tick(struct otpd *d, char *err)
{
    struct admin_override *ov = NULL;
    struct limits_override *lo = NULL;
    int changed = 0, kind;
    long n, i;
    enum otp_rc rc = admin_refresh(d->admin, &changed, err);

    /* An override, a block's end or removal, an unlock: a cached refusal
     * may be over (an override's change clears it in limits_overrides_set too). */
    if (changed & ADMIN_ROWS_MOVED)
        limits_cache_clear(d->limits);
    if (!(changed & ADMIN_OVERRIDES_CHANGED))
        goto out;
    if ((n = admin_overrides(d->admin, &ov)) < 0 || (lo = calloc((size_t)n + 1, sizeof(*lo))) == NULL) {
        log_msg(LOG_ERROR, "out of memory: the overrides in force are the last ones");
        goto out;
    }
    for (i = 0; i < n; i++) {
        snprintf(lo[i].rule, sizeof(lo[i].rule), "%s", ov[i].rule);
        for (kind = 0; kind < CFG_KEY_COUNT; kind++)
            snprintf(lo[i].values[kind], sizeof(lo[i].values[kind]), "%s", ov[i].values[kind]);
        lo[i].limit = ov[i].limit;
        lo[i].burst = ov[i].burst;
    }
    if (limits_overrides_set(d->limits, lo, (size_t)n) != OTP_OK)
        log_msg(LOG_ERROR, "out of memory: the overrides in force are the last ones");
    else
        log_msg(LOG_INFO, "%ld admin overrides in force", n);
out:
    limits_cache_vouch(d->limits, admin_read_ms(d->admin));
    free(lo);
    free(ov);
    return rc;
}

/* One line when the tick's work first fails (Redis away, most often), one
 * when it works again: not a line a second for each of its calls while
 * Redis is away (the API's own 503s and /readyz say the rest). */
static void otpd_tick_say(struct otpd *d, const char *what, const char *err)
{
    if (what != NULL && !d->tick_down)
        log_event(LOG_WARN, "tick.failing", LOG_FIELDS(LOG_STR("what", what), LOG_STR("reason", err)),
                  "housekeeping failing (%s: %s): lapsed holds, admin rows and the fleet's ends wait; said again "
                  "when it works", what, err);
    else if (what == NULL && d->tick_down)
        log_event(LOG_INFO, "tick.working", NULL, 0, "housekeeping works again");
    d->tick_down = what != NULL;
}

/* Once a second between signals: the abandons of 503'd requests and the
 * cached refusals' penalties, the fleet's lapsed holds, the admin rows, and
 * the messages other instances ended (after a code's life, a call begun
 * before it ends within pacer.timeout). */
static void otpd_tick(struct otpd *d)
{
    static const char *const what[] = {"lapsed holds", "admin rows", "the fleet's ends", "removed providers' queues"};
    char err[4][OTP_ERR_LEN] = {"", "", "", ""};
    size_t dropped = 0;
    int failed[4], i;

    limits_flush(d->limits);
    limits_penalties_flush(d->limits);
    failed[0] = limits_holds(d->limits, &dropped, err[0]) != OTP_OK;
    failed[1] = otpd_admin_tick(d, err[1]) != OTP_OK;
    failed[2] = sweep_run(&d->sweep, d->ledger, clock_wall_ms(), d->cfg->pacer.timeout_ms, otpd_fleet_states,
                          lanes_pacer(d->lanes, 0), err[2]) < 0;
    /* Every OTPD_ADOPT_TICKS: a silent instance's messages on a removed provider's queue. */
    failed[3] = ++d->ticks % OTPD_ADOPT_TICKS == 0 && lanes_adopt(d->lanes, err[3]) != OTP_OK;
    for (i = 0; i < 4 && !failed[i]; i++)
        ;
    otpd_tick_say(d, i < 4 ? what[i] : NULL, i < 4 ? err[i] : "");
}

/* Builds and starts everything; returns 0, or logs and returns -1. */
static int otpd_start(struct otpd *d)
{
    const struct config *c = d->cfg;
    struct store_opts so = {c->redis.host,           c->redis.port,           c->redis.db,
                            c->redis.password,       c->redis.timeout_ms,     c->redis.breaker_failures,
                            c->redis.breaker_open_ms, c->redis.sentinel_hosts, c->redis.sentinel_ports,
                            c->redis.n_sentinels,    c->redis.master,         c->redis.username, 0};
    struct store_opts pso;
    struct otp_deps deps;
    struct pacer_money money;
    struct pacer_site site = {.otp_ttl_ms = c->otp.ttl_ms, .listen_port = c->http.listen_port,
                              .currency = c->limits.currency, .prices = c->limits.prices, .n_prices = c->limits.n_prices};
    char err[OTP_ERR_LEN] = "";

    if ((d->keys = code_keys_new(c->secret, c->secret_len)) == NULL) {
        snprintf(err, sizeof(err), "cannot initialize libsodium");
        goto fail;
    }
    pso = so;
    pso.quiet = 1; /* the API's store reports Redis's risky settings */
    if ((d->store = store_new(&so)) == NULL || (d->pacer_store = store_new(&pso)) == NULL ||
        (d->limits = limits_new(d->store, &c->limits, &c->pacer)) == NULL ||
        (d->money = limits_money_new(d->limits, d->pacer_store)) == NULL) {
        snprintf(err, sizeof(err), "out of memory");
        goto fail;
    }
    money = (struct pacer_money){otpd_reserve, otpd_refund, d->money};
    if ((d->ledger = ledger_open(c->ledger.path, err)) == NULL ||
        (ledger_set_retention(d->ledger, c->ledger.retention_ms), 0) ||
        (d->lanes = lanes_new(&c->network, &site, d->pacer_store, d->ledger, &money, err)) == NULL)
        goto fail;
    if ((d->admin = admin_new(d->store, d->ledger, &c->limits)) == NULL ||
        (d->v2 = v2_new(d->store, d->ledger)) == NULL) {
        snprintf(err, sizeof(err), "out of memory");
        goto fail;
    }
    /* Delivery reports are the first provider's (docs/providers.md). */
    deps = (struct otp_deps){{&c->otp, &c->limits, &c->keys, &c->pacer, &c->network.lanes[0].provider},
                             d->keys, d->store, d->limits, d->lanes, d->ledger, .admin = d->admin,
                             .version = OTPD_VERSION};
    if ((d->otp = otp_new(&deps)) == NULL) {
        snprintf(err, sizeof(err), "out of memory");
        goto fail;
    }
    if (otp_start_pacer(d->otp, err) != OTP_OK ||
        (d->http = http_new(&c->http, &c->keys, d->otp, d->v2, d->tls, err)) == NULL)
        goto fail;
    return 0;
fail:
    log_msg(LOG_ERROR, "cannot start: %s", err);
    return -1;
}

/* A certificate that expires this soon is named in the log at start and
 * on each reload. */
#define OTPD_TLS_WARN_S (14 * 86400)

/* One line about the certificate serving: event is tls.loaded or
 * tls.reloaded. */
static void otpd_tls_log(const char *event, const struct tls_info *ti, int64_t now_s)
{
    char until[TIMESTAMP_LEN];

    timestamp_format(ti->not_after_s * 1000, until, sizeof(until));
    log_event(LOG_INFO, event,
              LOG_FIELDS(LOG_STR("fingerprint_sha256", ti->fingerprint), LOG_STR("subject", ti->subject),
                         LOG_STR("not_after", until), LOG_INT("chain", ti->chain)),
              "tls: serving %s (SHA-256 %s, %u in chain), valid until %s", ti->subject, ti->fingerprint, ti->chain,
              until);
    if (ti->warning[0])
        log_event(LOG_WARN, "tls.chain_out_of_date", NULL, 0, "%s", ti->warning);
    if (ti->not_after_s - now_s < OTPD_TLS_WARN_S)
        log_event(LOG_WARN, "tls.expires_soon", LOG_FIELDS(LOG_STR("not_after", until)),
                  "tls: the certificate expires at %s: renew it, then SIGHUP", until);
}

/* The key file open to more than otpd's user: said at start and on every
 * reload that read it, until it is mended. */
static void otpd_tls_key_mode(const struct tls_info *ti)
{
    if (ti->key_warning[0])
        log_event(LOG_WARN, "tls.key_permissions", NULL, 0, "%s", ti->key_warning);
}

/* SIGHUP's part for tls: the files named by the new config c are read
 * again, whether or not their names changed (a renewal rewrites them in
 * place). A certificate that fails a check is refused and the one serving
 * stays. */
static void otpd_tls_reload(struct otpd *d, const struct config *c)
{
    struct tls_info ti;
    char err[TLS_ERR_LEN] = "";
    int64_t now_s = (int64_t)time(NULL);
    int rc;

    if (d->tls == NULL || !c->tls.on)
        return; /* tls coming or going needs a restart: config_diff says so */
    rc = tls_reload(d->tls, &c->tls, now_s, &ti, err);
    if (rc < 0) {
        log_event(LOG_ERROR, "tls.reload_refused", LOG_FIELDS(LOG_STR("fingerprint_sha256", ti.fingerprint)),
                  "reload: the new certificate is refused, %s stays: %s", ti.fingerprint, err);
        return;
    }
    if (rc > 0)
        otpd_tls_log("tls.reloaded", &ti, now_s);
    otpd_tls_key_mode(&ti);
}

/* config_diff's callbacks for a reload: one line per changed key, never
 * a change left unsaid. */
static void otpd_applied(void *ctx, const char *path, int reload)
{
    (void)ctx;
    if (reload)
        log_event(LOG_INFO, "config.applied", LOG_FIELDS(LOG_STR("key", path)), "reload: %s changed: applied", path);
}

static void otpd_needs_restart(void *ctx, const char *path, int reload)
{
    (void)ctx;
    if (!reload)
        log_event(LOG_WARN, "config.restart_needed", LOG_FIELDS(LOG_STR("key", path)),
                  "reload: %s changed: needs a restart (the running value stays until then)", path);
}

/* text's lines joined by "; " (malloc'd; NULL when text is NULL or out of
 * memory), its last newline dropped. */
static char *otpd_one_line(const char *text)
{
    char *out, *o;

    if (text == NULL || (out = malloc(2 * strlen(text) + 1)) == NULL)
        return NULL;
    for (o = out; *text; text++) {
        if (*text != '\n')
            *o++ = *text;
        else if (text[1] != '\0')
            *o++ = ';', *o++ = ' ';
    }
    *o = '\0';
    return out;
}

/* SIGHUP: a valid file replaces what the key table marks reloadable (the
 * rules, prices and caps, countries, the pumping guard, otp.ttl and
 * otp.template) and names each other changed key as needing a restart; a
 * bad file is logged and changes nothing. */
static void otpd_reload(struct otpd *d, const char *path)
{
    char *errors = NULL;
    struct config *c = config_load(path, &errors);

    if (c == NULL) {
        /* One event, one line: config_load's errors are one a line. */
        char *line = otpd_one_line(errors);
        log_event(LOG_ERROR, "config.reload_refused", NULL, 0, "reload refused, the old rules stay: %s",
                  line ? line : errors ? errors : "");
        free(line);
        free(errors);
        return;
    }
    /* The level applies at once (log.level reloads); log.format needs a
     * restart: a collector reading the stream would misread a change of
     * form half-way through it. */
    log_set_level((enum log_level)c->log.level);
    /* Reloadable keys against the last reload, the others against the
     * start: a key that needs a restart is named on every reload until then. */
    config_diff(d->applied ? d->applied : d->cfg, c, otpd_applied, NULL);
    config_diff(d->cfg, c, otpd_needs_restart, NULL);
    if (admin_reload(d->admin, &c->limits) != OTP_OK)
        log_msg(LOG_ERROR, "reload: out of memory; admin bodies are checked against the old rules");
    if (limits_reload(d->limits, &c->limits) == OTP_OK)
        log_event(LOG_INFO, "config.reload",
                  LOG_FIELDS(LOG_INT("rules", c->limits.n_rules), LOG_INT("caps", c->limits.n_caps),
                             LOG_STR("log_level", log_level_name((enum log_level)c->log.level))),
                  "reloaded %zu limit rules and %zu cost caps from %s", c->limits.n_rules, c->limits.n_caps, path);
    else
        log_msg(LOG_ERROR, "reload failed: out of memory; the old rules stay");
    otp_reload(d->otp, &c->otp);
    lanes_set_code_ttl(d->lanes, c->otp.ttl_ms);
    lanes_set_routes(d->lanes, &c->network);
    otpd_tls_reload(d, c);
    config_free(d->applied);
    d->applied = c;
}

/* What the command line asks: run (or check) the file at *path; returns
 * -1 to go on, else the exit status (--help, --version and the table print
 * to stdout and exit 0; a usage error prints to stderr, EX_USAGE). */
static int otpd_args(int argc, char **argv, const char **path, int *check)
{
    int i;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-c") == 0 && i + 1 < argc) {
            *path = argv[++i];
        } else if (strcmp(argv[i], "--check") == 0) {
            *check = 1;
        } else if (strcmp(argv[i], "--print-config-table") == 0) {
            config_print_table(stdout);
            return EX_OK;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("otpd %s\n", OTPD_VERSION);
            return EX_OK;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return EX_OK;
        } else {
            fprintf(stderr, "otpd: unknown argument %s\n", argv[i]);
            usage(stderr);
            return EX_USAGE;
        }
    }
    if (*path == NULL) {
        fprintf(stderr, "otpd: no config file: give -c FILE\n");
        usage(stderr);
        return EX_USAGE;
    }
    return -1;
}

/* --check: validates the file on any machine (a CI job, an operator's
 * laptop): each secret's variable must be named, but no value is read;
 * the certificate and key files too, as a start would read them (the
 * key's content is never printed). Returns the exit status. */
static int otpd_check(const char *path)
{
    char *errors = NULL;
    struct config *c;
    int ok;

    config_set_secrets(0);
    c = config_load(path, &errors);
    ok = c != NULL;
    fputs(errors ? errors : "", stderr);
    if (ok && c->tls.on) {
        struct tls_info ti;
        char err[TLS_ERR_LEN] = "";
        if (tls_check(&c->tls, (int64_t)time(NULL), &ti, err) < 0) {
            fprintf(stderr, "%s: %s\n", path, err);
            ok = 0;
        }
    }
    if (ok)
        printf("%s: ok\n", path);
    free(errors);
    config_free(c);
    return ok ? EX_OK : 1;
}

/* The certificate before anything opens: a bad one is the config's fault,
 * told before any listening. Returns 0, or -1 (logged). */
static int otpd_tls_open(struct otpd *d, const char *path)
{
    struct tls_info ti;
    char err[TLS_ERR_LEN] = "";
    int64_t now_s = (int64_t)time(NULL);

    if (!d->cfg->tls.on)
        return 0;
    if ((d->tls = tls_new(&d->cfg->tls, now_s, err)) == NULL) {
        log_event(LOG_ERROR, "tls.refused", NULL, 0, "cannot start: %s: %s", path, err);
        return -1;
    }
    tls_info(d->tls, &ti);
    otpd_tls_log("tls.loaded", &ti, now_s);
    otpd_tls_key_mode(&ti);
    return 0;
}

/* "webhook", or "local-kannel, twilio": the providers, for the start line. */
static const char *otpd_providers_text(const struct otpd *d)
{
    static char text[CFG_LANES_MAX * (ROUTE_NAME_MAX + 2)];
    size_t i, n = 0;

    if (!d->cfg->network.named)
        return lanes_adapter(d->lanes, 0);
    for (i = 0; i < d->cfg->network.n_lanes && n < sizeof(text); i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n, "%s%s", i ? ", " : "", d->cfg->network.lanes[i].name);
    return text;
}

/* Serves until SIGTERM or SIGINT (returned): SIGHUP reloads path, and
 * between signals the tick runs once a second. */
static int otpd_serve(struct otpd *d, const char *path, const sigset_t *set)
{
    int sig;

    log_event(LOG_INFO, "otpd.started", LOG_FIELDS(LOG_STR("version", OTPD_VERSION)),
              "otpd listening on %s:%d%s (provider %s, rate %d/s, %zu rules)", d->cfg->http.listen_host,
              d->cfg->http.listen_port, d->tls ? " with TLS" : "", otpd_providers_text(d), d->cfg->network.lanes[0].pacer.rate,
              d->cfg->limits.n_rules);
    if (d->cfg->http.listen_internal_port != 0)
        log_msg(LOG_INFO, "probes and metrics on %s:%d only (listen_internal)", d->cfg->http.listen_internal_host,
                d->cfg->http.listen_internal_port);
    for (;;) {
        sig = sigtimedwait(set, NULL, &(struct timespec){1, 0});
        if (sig < 0)
            otpd_tick(d);
        else if (sig == SIGHUP)
            otpd_reload(d, path);
        else
            return sig;
    }
}

int main(int argc, char **argv)
{
    struct otpd d = {0};
    const char *path = NULL;
    char *errors = NULL, err[OTP_ERR_LEN] = "";
    sigset_t set;
    int check = 0, sig, rc;

    if ((rc = otpd_args(argc, argv, &path, &check)) >= 0)
        return rc;
    if (check)
        return otpd_check(path);
    if ((d.cfg = config_load(path, &errors)) == NULL) {
        fputs(errors ? errors : "", stderr);
        free(errors);
        return EX_CONFIG;
    }
    log_setup((enum log_format)d.cfg->log.format, (enum log_level)d.cfg->log.level);
    if (otpd_tls_open(&d, path) < 0) {
        config_free(d.cfg);
        return EX_CONFIG;
    }
    otpd_harden();
    if (config_scrub_env() != 0)
        log_msg(LOG_WARN, "out of memory: a secret variable stays in the environment");

    /* Every thread inherits this mask, so only sigwait sees them. */
    sigemptyset(&set);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (otpd_start(&d) < 0) {
        otpd_free(&d);
        return EX_UNAVAILABLE;
    }
    /* The rows now, not a second late: blocks, and a refusal cache vouched for. */
    otpd_tick_say(&d, otpd_admin_tick(&d, err) != OTP_OK ? "admin rows" : NULL, err);
    sig = otpd_serve(&d, path, &set);
    log_msg(LOG_INFO, "stopping on signal %d: no new requests, draining provider calls", sig);
    http_quiesce(d.http);
    otpd_free(&d);
    log_msg(LOG_INFO, "stopped");
    return EX_OK;
}
