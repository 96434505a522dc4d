/*
 * ro: a ledger opened read-only for the operator's commands (otpctl
 * ledger, verify, stats), beside a running otpd or on a copy alike: one
 * open per file a command reads.
 */
#include "ro.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A reader waits this long for a busy WAL index (otpd recovering it). */
#define RO_BUSY_MS 5000

/*
 * The URI that opens path read-only: "file:" and the path with the bytes a
 * URI gives a meaning to escaped, so any file name opens as itself. A
 * ledger without a -wal file is open in no otpd (SQLite deletes it when the
 * last connection closes), so it is opened immutable: a plain read-only
 * open would create -wal and -shm files owned by whoever runs otpctl, which
 * could keep otpd from opening its ledger later. Immutable means no locks:
 * an otpd started meanwhile writes to a new -wal this read does not see
 * (the read is of the file as it was), and only a checkpoint into the file
 * during the read (at 1,000 WAL pages, or when that otpd stops) could make
 * the read fail or miss rows. Nothing here can change the file either way.
 * Caller frees.
 */
static char *ro_uri(const char *path, int immutable)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(path), i, o;
    char *uri = malloc(3 * n + 48);

    if (uri == NULL)
        return NULL;
    /* "file://" and an empty authority before an absolute path, so a path
     * starting with "//" is not read as a host. */
    o = path[0] == '/' ? 7 : 5;
    memcpy(uri, "file://", o);
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)path[i];
        if (c == '%' || c == '?' || c == '#' || c <= ' ' || c >= 0x7f) {
            uri[o++] = '%';
            uri[o++] = hex[c >> 4];
            uri[o++] = hex[c & 15];
        } else {
            uri[o++] = (char)c;
        }
    }
    snprintf(uri + o, 3 * n + 48 - o, "%s", immutable ? "?mode=ro&immutable=1" : "?mode=ro");
    return uri;
}

enum otp_rc ro_open(const char *path, sqlite3 **out, int *version, char *err)
{
    struct stat sb;
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    char *uri = NULL, *wal = NULL;
    enum otp_rc rc = OTP_EINVAL;

    *out = NULL;
    if (stat(path, &sb) != 0) {
        snprintf(err, OTP_ERR_LEN, "%s: %s", path, strerror(errno));
        return OTP_ENOTFOUND;
    }
    if (!S_ISREG(sb.st_mode)) {
        snprintf(err, OTP_ERR_LEN, "%s: not a ledger (not a regular file)", path);
        return OTP_EINVAL;
    }
    if ((wal = malloc(strlen(path) + 5)) == NULL)
        goto oom;
    snprintf(wal, strlen(path) + 5, "%s-wal", path);
    if ((uri = ro_uri(path, stat(wal, &sb) != 0 && errno == ENOENT)) == NULL)
        goto oom;
    if (sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL) !=
        SQLITE_OK) {
        snprintf(err, OTP_ERR_LEN, "%s: %s", path, db ? sqlite3_errmsg(db) : "out of memory");
        rc = OTP_ENOTFOUND;
        goto out;
    }
    sqlite3_busy_timeout(db, RO_BUSY_MS);
    /* The file is read here first: a file that is not SQLite fails now. */
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        snprintf(err, OTP_ERR_LEN, "%s: not a ledger (%s)", path, sqlite3_errmsg(db));
        goto out;
    }
    *version = sqlite3_column_int(st, 0);
    if (*version == 0) {
        snprintf(err, OTP_ERR_LEN, "%s: not a ledger (no otpd schema in it)", path);
        goto out;
    }
    rc = OTP_OK;
out:
    sqlite3_finalize(st);
    free(uri);
    free(wal);
    if (rc == OTP_OK)
        *out = db;
    else
        sqlite3_close(db);
    return rc;
oom:
    snprintf(err, OTP_ERR_LEN, "%s: out of memory", path);
    rc = OTP_ENOMEM;
    goto out;
}
