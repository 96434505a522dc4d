/*
 * logsum: see logsum.h. A fixed table of kinds, each with the start of its
 * window and the answers counted in it; kinds are few (three statuses,
 * a handful of outcomes, the routes), so a linear scan is enough.
 */
#include "logsum.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct logsum_kind {
    struct logsum_row row; /* row.count: answers counted since start_ms */
    int64_t start_ms;      /* when its first answer (logged in full) came */
    int used;
};

struct logsum {
    pthread_mutex_t mu; /* guards kinds; a leaf lock */
    int64_t window_ms;
    struct logsum_kind kinds[LOGSUM_KINDS];
};

struct logsum *logsum_new(int64_t window_ms)
{
    struct logsum *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    pthread_mutex_init(&s->mu, NULL);
    s->window_ms = window_ms;
    return s;
}

int logsum_note(struct logsum *s, unsigned status, const char *outcome, const char *route, int64_t now_ms)
{
    struct logsum_kind *k, *free_k = NULL;
    char o[LOGSUM_NAME_MAX], r[LOGSUM_NAME_MAX];
    int full = 1, i;

    snprintf(o, sizeof(o), "%s", outcome);
    snprintf(r, sizeof(r), "%s", route);
    pthread_mutex_lock(&s->mu);
    for (i = 0; i < LOGSUM_KINDS; i++) {
        k = &s->kinds[i];
        if (!k->used) {
            free_k = free_k ? free_k : k;
            continue;
        }
        if (k->row.status == status && strcmp(k->row.outcome, o) == 0 && strcmp(k->row.route, r) == 0) {
            /* Past its window but not yet flushed: counted, the flush writes it soon. */
            k->row.count++;
            full = 0;
            goto out;
        }
    }
    if (free_k != NULL) {
        memset(free_k, 0, sizeof(*free_k));
        free_k->used = 1;
        free_k->start_ms = now_ms;
        free_k->row.status = status;
        free_k->row.window_ms = s->window_ms;
        memcpy(free_k->row.outcome, o, sizeof(o));
        memcpy(free_k->row.route, r, sizeof(r));
    }
out:
    pthread_mutex_unlock(&s->mu);
    return full;
}

void logsum_flush(struct logsum *s, int64_t now_ms, void (*emit)(void *ctx, const struct logsum_row *r),
                  void *ctx)
{
    struct logsum_row ended[LOGSUM_KINDS];
    int n = 0, i;

    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    for (i = 0; i < LOGSUM_KINDS; i++) {
        struct logsum_kind *k = &s->kinds[i];
        if (!k->used || (now_ms != INT64_MAX && now_ms - k->start_ms < s->window_ms))
            continue;
        if (k->row.count > 0)
            ended[n++] = k->row;
        k->used = 0;
    }
    pthread_mutex_unlock(&s->mu);
    for (i = 0; i < n; i++)
        emit(ctx, &ended[i]);
}

void logsum_free(struct logsum *s)
{
    if (s == NULL)
        return;
    pthread_mutex_destroy(&s->mu);
    free(s);
}
