/*
 * ledger's internals, shared by the files of the writing side: nothing
 * outside src/ledger includes this. The module's files, one job each:
 *
 *   ledger.c            open (the migrations of schema/), close, and the API
 *                       (ledger.h), which builds ops; the readers' two reads
 *   ledger_queue.c      ops, the writer's queue and the counted refusals
 *   ledger_writer.c     the writer thread: batches, group commit, each row's
 *                       chain link
 *   ledger_retention.c  prune: the rows past retention, their links, and the
 *                       messages that never end
 *   ledger_state.c      a message's states: the one place the ledger spells
 *                       them (ledger_state.h)
 *   chain.c             the chain's format, shared with chaincheck.c
 *   sweep.c             ends here the messages the fleet ended (sweep.h)
 *
 * and the operator's read side, which only otpctl links: ro.c (read-only
 * open), history.c, summary.c and chaincheck.c.
 *
 * Threads and locks: the writer thread alone uses wdb, its statements
 * and the chain's head; request threads and the pacer submit under mu;
 * readers share rdb under rmu. No lock is held while another is taken,
 * and none across a commit.
 */
#ifndef OTPD_LEDGER_INT_H
#define OTPD_LEDGER_INT_H

#include <pthread.h>
#include <stdint.h>

#include <sqlite3.h>

#include "chain.h"
#include "ledger.h"
#include "ledger_state.h"

#define LEDGER_ARGS 14
/* Distinct 4xx rows counted at once; one more flushes them. */
#define LEDGER_AGG_MAX 1024
/* Buckets of the counted rows' index: a power of two, twice the rows, so a
 * chain holds one row or two on average. */
#define LEDGER_AGG_BUCKETS 2048

/* The transaction's own statements, prepared once (ledger_txn). */
enum ledger_txn { LT_BEGIN, LT_SAVEPOINT, LT_ROLLBACK_TO, LT_RELEASE, LT_COMMIT, LT_COUNT };

/* What an op writes: each kind runs one statement or two (ledger_writer.c). */
enum ledger_kind { LK_REQUEST, LK_VER_NEW, LK_VER_UPDATE, LK_MSG_NEW, LK_MSG_STATE, LK_SEND, LK_ADMIN, LK_COUNT };

/* One bound value: text (NULL allowed) or integer. */
struct ledger_arg {
    int is_text; /* -1: a string copy failed (out of memory), noticed when submitted */
    int64_t i;
    char *s;
};

/* Someone waiting for a group of submissions to be durable. */
struct ledger_wait {
    int done;       /* set by the writer, under ledger.mu */
    enum otp_rc rc; /* OTP_OK, or OTP_EIO when the group did not commit */
};

/* One statement's worth of work. Submissions are groups of one or more
 * ops: a group commits whole or not at all (a savepoint), and the writer
 * never splits a group across transactions. */
struct ledger_op {
    struct ledger_op *next;
    enum ledger_kind kind;
    int first, last;         /* the group's bounds */
    struct ledger_wait *wait; /* on the group's last op, or NULL */
    int64_t agg_s;            /* a counted 4xx row: its second */
    uint64_t hash;            /* a counted 4xx row: of everything but its time and count */
    struct ledger_op *agg_next; /* a counted 4xx row: the next in its index bucket */
    int *moved;               /* LK_MSG_STATE with a waiter: set to 1 when the message moved */
    int n;
    struct ledger_arg a[LEDGER_ARGS];
};

struct ledger {
    sqlite3 *wdb; /* the writer thread's */
    sqlite3 *rdb; /* readers', under rmu */
    pthread_mutex_t rmu;
    sqlite3_stmt *stmt[LK_COUNT][2];
    sqlite3_stmt *link; /* appends a chain link */
    sqlite3_stmt *txn[LT_COUNT]; /* enum ledger_txn */
    sqlite3_stmt *row[CT_N][2]; /* reads a row back to link it: by rowid, by id (mutable tables) */
    /* The chain's head, the writer's alone: moved by each link, put back
     * when a group rolls back, read from the file again (chain_stale) at the
     * start and after a transaction failed. Reading it per transaction
     * instead cost a prepare each time: malloc churn and a fifth of the
     * writer's throughput. */
    int64_t chain_seq;
    unsigned char chain_prev[SHA256_LEN];
    int chain_stale;
    pthread_t writer;
    int started;
    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t wake;  /* the writer waits for work */
    pthread_cond_t done;  /* waiters and submitters wait for commits */
    struct ledger_op *head, *tail;
    /* 4xx request rows being counted (ledger_count), in arrival order: a
     * flood of refusals becomes one row per key, reason and second. */
    struct ledger_op *agg, *agg_tail; /* agg_tail: the last of agg, when agg is not NULL */
    size_t n_agg;
    /* The same rows by bucket (ledger_agg_bucket), so counting a refusal
     * costs one short chain, not a walk of up to LEDGER_AGG_MAX rows
     * under mu: that walk was 92 % of ledger_request's samples in a
     * profile of distinct keys refused. The list above keeps the order. */
    struct ledger_op *agg_idx[LEDGER_AGG_BUCKETS];
    int64_t retention_ms; /* 0: keep everything */
    int64_t next_prune_ms;
    int stop;
    int last_commit_ok; /* 0 after a transaction failed, until one commits */
    struct ledger_stats stats;
};

/* ledger_queue.c: ops (the caller owns one until it submits it), and the
 * writer's queue. */
struct ledger_op *ledger_op_new(enum ledger_kind kind);
/* Appends a copy of s (NULL allowed) or v as the op's next argument. */
void ledger_op_text(struct ledger_op *op, const char *s);
void ledger_op_int(struct ledger_op *op, int64_t v);
/* Frees op and its copies; NULL allowed. */
void ledger_op_free(struct ledger_op *op);
/*
 * Queues the group ops[0..n-1] for the writer, taking the ops. With wait,
 * blocks until the group's transaction is settled and returns its result;
 * with may_block, waits for a commit while the queue is full. A NULL op
 * (or a failed string copy) means out of memory: nothing is queued.
 */
enum otp_rc ledger_submit(struct ledger *l, struct ledger_op **ops, int n, int wait, int may_block);
/* A request thread's single op: waits at the queue cap, not for the commit. */
enum otp_rc ledger_submit_one(struct ledger *l, struct ledger_op *op);
/* The pacer thread's: waits for nothing. */
enum otp_rc ledger_submit_paced(struct ledger *l, struct ledger_op *op);
/* A 4xx request row, counted into the row of its key, decision and second;
 * takes op (NULL: out of memory). */
enum otp_rc ledger_count(struct ledger *l, struct ledger_op *op);
/* Moves the counted rows of seconds before before_s to the writer's queue;
 * under mu. Returns how many moved. */
size_t ledger_agg_flush_locked(struct ledger *l, int64_t before_s);

/* ledger_writer.c: on the writer thread unless said otherwise. */
/* Prepares the writer's statements on l->wdb (ledger_open's thread); -1
 * with detail in err. ledger_writer_finalize (NULL ones too) undoes it. */
int ledger_writer_prepare(struct ledger *l, char *err);
void ledger_writer_finalize(struct ledger *l);
/* The writer thread's body (arg: the ledger); returns once l->stop is set
 * and everything queued has been committed or refused. */
void *ledger_writer_main(void *arg);
/* Reads the chain's head again if a failed transaction left it stale;
 * inside a transaction. SQLite's result code. */
int ledger_chain_fresh(struct ledger *l);
/* Appends the link of a row of tbl (or a prune link), inside the
 * transaction. SQLite's result code. */
int ledger_link(struct ledger *l, const char *tbl, int64_t row_id, int64_t ts_ms,
                const unsigned char digest[SHA256_LEN]);
/* Runs op's statements and links the rows they wrote; the first SQLite
 * error code, or SQLITE_OK. */
int ledger_exec(struct ledger *l, const struct ledger_op *op);

/* ledger_retention.c: deletes what is older than cutoff_ms (now_ms minus
 * the retention) in one transaction. */
void ledger_prune(struct ledger *l, int64_t now_ms, int64_t cutoff_ms);

#endif
