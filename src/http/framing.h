/*
 * framing: refuses the header sections that a proxy in front of otpd could
 * read with other message boundaries than libmicrohttpd does (request
 * smuggling): Transfer-Encoding with Content-Length, a Transfer-Encoding
 * other than one "chunked", Content-Length or Content-Type given twice, a
 * folded header line (obs-fold), a field name that is not a token.
 *
 * Load: one walk over a request's headers (and another over its trailers,
 * when chunked) per request.
 */
#ifndef OTPD_FRAMING_H
#define OTPD_FRAMING_H

#include <microhttpd.h>

/* What is wrong with con's fields of kind (MHD_HEADER_KIND once the
 * headers are in, MHD_FOOTER_KIND once a chunked body is): a static
 * sentence for a 400's detail, or NULL when nothing is. The caller answers
 * 400 and closes the connection: after such a request nothing on it can be
 * trusted to start where a proxy thinks it does. */
const char *framing_check(struct MHD_Connection *con, enum MHD_ValueKind kind);

#endif
