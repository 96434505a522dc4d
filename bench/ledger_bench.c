/*
 * ledger_bench: the ledger writer's throughput through its public API
 * (src/ledger/ledger.h), the traffic of one accepted and verified code per
 * loop: the accept (verification, message, event, request: waits for its
 * commit, as a request thread does), sending, the provider call, sent, the
 * verification's end and the verify's request row. THREADS request threads
 * at once, so group commit batches them as in otpd.
 *
 * Usage: ledger_bench DIR LOOPS THREADS; prints "rows_per_s N ops N s S".
 * Built by bench/ledger.py against two revisions of src/ledger.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/ledger/ledger.h"

static struct ledger *bench_l;
static int bench_loops;

static int64_t bench_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *bench_thread(void *arg)
{
    int t = (int)(intptr_t)arg, i;
    char mid[40], vid[40], phone[20];

    for (i = 0; i < bench_loops; i++) {
        int64_t now = bench_now_ms();
        snprintf(mid, sizeof(mid), "m-%d-%d", t, i);
        snprintf(vid, sizeof(vid), "v-%d-%d", t, i);
        snprintf(phone, sizeof(phone), "+9198%02d%06d", t, i);
        struct ledger_message m = {.id = mid,
                                   .verification_id = vid,
                                   .api_key = "login-web",
                                   .phone = phone,
                                   .created_ms = now,
                                   .expires_ms = now + 300000,
                                   .price_minor = 20,
                                   .cost_ms = now,
                                   .cost_caps = "3600000"};
        struct ledger_request r = {.ts_ms = now,
                                   .kind = "issue",
                                   .api_key = "login-web",
                                   .phone = phone,
                                   .client_ip = "10.0.0.1",
                                   .decision = "accepted",
                                   .verification_id = vid,
                                   .message_id = mid,
                                   .http_status = 202,
                                   .purpose = "login"};
        struct ledger_send s = {.ts_ms = now,
                                .message_id = mid,
                                .attempt = 1,
                                .provider = "webhook",
                                .http_status = 200,
                                .latency_ms = 12,
                                .outcome = "sent",
                                .provider_id = "p-1",
                                .cost_minor = 20};
        if (ledger_accept(bench_l, &m, now + 300000, &r) != OTP_OK) {
            fprintf(stderr, "accept failed\n");
            exit(1);
        }
        ledger_message_state(bench_l, mid, MSG_SENDING, MSG_BIT(MSG_QUEUED), NULL, NULL, 1, now);
        ledger_send(bench_l, &s);
        ledger_message_state(bench_l, mid, MSG_SENT, MSG_BIT(MSG_SENDING), "p-1", NULL, -1, now);
        ledger_verification_update(bench_l, vid, "verified", 0, now);
        r.kind = "verify";
        r.decision = "verified";
        r.http_status = 200;
        r.message_id = NULL;
        ledger_request(bench_l, &r);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t th[64];
    struct ledger_stats st;
    struct timespec a, b;
    char path[4096], err[OTP_ERR_LEN];
    int threads = 0, i;
    double s;

    if (argc == 4) {
        threads = (int)strtol(argv[3], NULL, 10);
        bench_loops = (int)strtol(argv[2], NULL, 10);
    }
    if (argc != 4 || threads < 1 || threads > 64 || bench_loops < 1) {
        fprintf(stderr, "usage: ledger_bench DIR LOOPS THREADS\n");
        return 64;
    }
    snprintf(path, sizeof(path), "%s/bench.db", argv[1]);
    if ((bench_l = ledger_open(path, err)) == NULL) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, bench_thread, (void *)(intptr_t)i);
    for (i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    ledger_close(bench_l); /* commits everything submitted */
    clock_gettime(CLOCK_MONOTONIC, &b);
    s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    (void)st;
    /* Rows: 4 per accept, 1 + 1 event per state change, 1 send, 1 update, 1 request = 10 per loop. */
    printf("rows_per_s %.0f rows %d s %.3f\n", 10.0 * bench_loops * threads / s, 10 * bench_loops * threads,
           s);
    return 0;
}
