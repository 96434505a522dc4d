/*
 * route: which route a destination takes. A route pairs a match with the
 * providers to try, in order; the routes are an ordered list (the config's).
 * A match is "*" (any destination), a region ("GB": ISO 3166, two
 * upper-case letters, as libphonenumber names it) or an E.164 prefix ("+"
 * and 1 to 15 digits: "+44", "+4474").
 *
 * Pure: no I/O, no clock, no allocation; any thread. Parsing runs at config
 * load; a match is a scan of at most ROUTES_MAX routes per message.
 */
#ifndef OTPD_ROUTE_H
#define OTPD_ROUTE_H

#include <stddef.h>

#define ROUTE_MATCH_MAX 17 /* "+" and up to 15 digits, NUL */
#define ROUTE_PROVIDERS_MAX 4
#define ROUTE_NAME_MAX 32 /* a provider's name, NUL included */
#define ROUTES_MAX 64

enum route_kind { ROUTE_ANY, ROUTE_REGION, ROUTE_PREFIX };

struct route {
    char match[ROUTE_MATCH_MAX]; /* the match's text, as parsed */
    enum route_kind kind;
    char providers[ROUTE_PROVIDERS_MAX][ROUTE_NAME_MAX]; /* tried in this order */
    int n_providers;                                     /* 1 to ROUTE_PROVIDERS_MAX */
};

/* Parses match text into r->match/r->kind: 0, or -1 with a short reason in
 * why (why_cap bytes; why may be NULL), r untouched. Other fields of r are
 * left as they are. */
int route_parse_match(const char *text, struct route *r, char *why, size_t why_cap);

/* The route for destination e164 ("+447400123456") whose region
 * (libphonenumber's, "GB"; "" when unknown) and country calling code digits
 * count cc_digits (1 to 3) are given: the most specific match, NULL when
 * none. Most specific first:
 *   1. a prefix longer than the country calling code, longest first
 *      ("+4474" beats "GB");
 *   2. a region equal to region ("CA" beats "+1");
 *   3. a prefix of the country calling code or shorter ("+1", "+44"),
 *      longest first;
 *   4. "*".
 * Ties go to the earlier route. A prefix matches when e164 starts with it.
 * The result points into routes. */
const struct route *route_match(const struct route *routes, size_t n, const char *e164, const char *region,
                                int cc_digits);

#endif
