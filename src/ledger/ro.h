/*
 * ro: opening a ledger read-only, shared by the operator's readers
 * (history.c, chaincheck.c, summary.c). Private to src/ledger.
 *
 * Each file is opened with SQLITE_OPEN_READONLY; a ledger no otpd has open
 * (no -wal file beside it) as immutable, so that no -wal or -shm file owned
 * by the operator appears beside it. Nothing here can change the file.
 */
#ifndef OTPD_RO_H
#define OTPD_RO_H

#include <sqlite3.h>

#include "../base/rc.h"

/*
 * Opens path read-only; on success *out is the caller's (sqlite3_close)
 * and *version is its schema version (PRAGMA user_version, at least 1).
 * Else *out is NULL, err names the file and says why, and the result is
 * OTP_ENOTFOUND (no such file, or it cannot be opened), OTP_EINVAL (not
 * SQLite, or no otpd schema) or OTP_ENOMEM.
 */
enum otp_rc ro_open(const char *path, sqlite3 **out, int *version, char *err);

#endif
