/*
 * framing: see framing.h.
 *
 * Why these. libmicrohttpd 0.9.75 reads a body as chunked when
 * Transfer-Encoding is "chunked", whatever Content-Length says, and keeps
 * the connection. A proxy that trusts Content-Length forwards what it
 * thinks is one body; otpd reads the chunked part as the body and the rest
 * as the start of the next request, which the next client's bytes on that
 * reused connection complete, with that client's Authorization. Any other
 * Transfer-Encoding ("gzip, chunked", "xchunked", two of them) is read by
 * MHD as a body that ends with the connection, by a proxy as something
 * else. RFC 9112 (6.1, 6.3, 5.2) tells a server to refuse all of these, and
 * obs-fold, and to close the connection after.
 *
 * How obs-fold is seen. MHD 0.9.75 takes a line that starts with a space
 * or a tab as the continuation of the one before, silently, and it appends
 * the continuation to the field's *name* (process_broken_line extends the
 * name's string, not the value's): "X-A: 1\r\n b\r\n" reaches us as a field
 * "X-Ab" with value "1", and "Transfer-Encoding:\r\n chunked\r\n" as a field
 * "Transfer-Encodingchunked", which MHD then does not see as framing at all.
 * So no value shows the fold. What does: MHD parses a header line in place
 * in its read buffer, replacing the colon with a NUL and pointing the value
 * past the colon and its optional whitespace. For every line it did not
 * fold, the value therefore starts right after the name's NUL and that
 * whitespace. The name of a folded line was grown into a new block of the
 * connection's memory pool (always one allocated after the read buffer,
 * hence at a higher address than the value; or, were the name the pool's
 * last block, grown in place over the colon): either way the value no
 * longer follows the name, which is what framing_sound checks. A
 * continuation line right after the request line (no field to fold into)
 * becomes a name that starts with a space, and a space before the colon
 * stays in the name: neither name is a token. The check relies on how MHD
 * 0.9.75 lays out what it parsed; the build stops on another version, whose
 * handling of obs-fold must be looked at again (later versions fold into
 * the value or refuse, see their client discipline option).
 */
#include "framing.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

#if MHD_VERSION != 0x00097500
#error "framing.c's obs-fold check knows libmicrohttpd 0.9.75's parser only: check how this version folds"
#endif

/* The fields that frame a message, as counted in one walk. */
struct framing {
    int content_length, content_type, transfer_encoding; /* how often each came */
    int te_other;                                        /* a Transfer-Encoding other than "chunked" */
    int unsound;                                         /* a folded line, or a name that is not a token */
};

/* RFC 9110's tchar: what a field name is made of. */
static int framing_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* 1 when key is a token and value starts where MHD's in-place parse of an
 * unfolded line puts it: after key's NUL (the colon was) and only spaces
 * or tabs. Addresses are compared as integers: a folded line's name lives
 * in another block of the same pool. */
static int framing_sound(const char *key, const char *value)
{
    size_t n = strlen(key), i;
    const char *p = key + n + 1;

    for (i = 0; i < n; i++)
        if (!framing_tchar((unsigned char)key[i]))
            return 0;
    if (n == 0 || value == NULL || (uintptr_t)value < (uintptr_t)p)
        return 0;
    for (; (uintptr_t)p < (uintptr_t)value; p++)
        if (*p != ' ' && *p != '\t')
            return 0;
    return 1;
}

static enum MHD_Result framing_walk(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    struct framing *f = cls;

    (void)kind;
    if (!framing_sound(key, value))
        f->unsound = 1;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
        f->content_length++;
    else if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_TYPE) == 0)
        f->content_type++;
    else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        f->transfer_encoding++;
        if (value == NULL || strcasecmp(value, "chunked") != 0)
            f->te_other = 1;
    }
    return MHD_YES;
}

const char *framing_check(struct MHD_Connection *con, enum MHD_ValueKind kind)
{
    struct framing f = {0};

    MHD_get_connection_values(con, kind, framing_walk, &f);
    if (f.unsound)
        return "a header line is folded (obs-fold) or its name is not a token";
    if (f.transfer_encoding > 0 && f.content_length > 0)
        return "Transfer-Encoding and Content-Length may not come together";
    if (f.transfer_encoding > 1 || f.te_other)
        return "Transfer-Encoding may only be chunked, once";
    if (f.content_length > 1 || f.content_type > 1)
        return "Content-Length and Content-Type may each come once";
    return NULL;
}
