/* route: parses a route's match and picks the most specific route for a destination. */
#include "route.h"

#include <stdio.h>
#include <string.h>

/* Each match a route can make, most specific first (route.h). */
enum tier { TIER_LONG_PREFIX, TIER_REGION, TIER_CC_PREFIX, TIER_ANY, TIER_NONE };

static void set_why(char *why, size_t why_cap, const char *reason)
{
    if (why != NULL && why_cap > 0)
        snprintf(why, why_cap, "%s", reason);
}

int route_parse_match(const char *text, struct route *r, char *why, size_t why_cap)
{
    enum route_kind kind;
    size_t len, i;

    if (text == NULL || *text == '\0') {
        set_why(why, why_cap, "empty match");
        return -1;
    }
    len = strlen(text);
    if (strcmp(text, "*") == 0) {
        kind = ROUTE_ANY;
    } else if (text[0] == '+') {
        if (len < 2 || len > ROUTE_MATCH_MAX - 1) {
            set_why(why, why_cap, "a prefix is '+' and 1 to 15 digits");
            return -1;
        }
        for (i = 1; i < len; i++) {
            if (text[i] < '0' || text[i] > '9') {
                set_why(why, why_cap, "a prefix is '+' and digits only");
                return -1;
            }
        }
        kind = ROUTE_PREFIX;
    } else if (len == 2 && text[0] >= 'A' && text[0] <= 'Z' && text[1] >= 'A' && text[1] <= 'Z') {
        kind = ROUTE_REGION;
    } else {
        set_why(why, why_cap, "not \"*\", a region (two upper-case letters) or a prefix ('+' and digits)");
        return -1;
    }
    memcpy(r->match, text, len + 1);
    r->kind = kind;
    return 0;
}

/* Where r stands for this destination, and its prefix's digit count in *digits (0 for the others). */
static enum tier route_tier(const struct route *r, const char *e164, const char *region, int cc_digits,
                            size_t *digits)
{
    size_t len = strlen(r->match);

    *digits = 0;
    switch (r->kind) {
    case ROUTE_ANY:
        return TIER_ANY;
    case ROUTE_REGION:
        return region != NULL && region[0] != '\0' && strcmp(r->match, region) == 0 ? TIER_REGION : TIER_NONE;
    case ROUTE_PREFIX:
        if (e164 == NULL || strncmp(e164, r->match, len) != 0)
            return TIER_NONE;
        *digits = len - 1;
        return (int)*digits > cc_digits ? TIER_LONG_PREFIX : TIER_CC_PREFIX;
    }
    return TIER_NONE;
}

const struct route *route_match(const struct route *routes, size_t n, const char *e164, const char *region,
                                int cc_digits)
{
    const struct route *best = NULL;
    enum tier best_tier = TIER_NONE, t;
    size_t best_digits = 0, digits, i;

    for (i = 0; i < n; i++) {
        t = route_tier(&routes[i], e164, region, cc_digits, &digits);
        /* Strictly better only: a tie stays with the earlier route. */
        if (t < best_tier || (t == best_tier && t != TIER_NONE && digits > best_digits)) {
            best = &routes[i];
            best_tier = t;
            best_digits = digits;
        }
    }
    return best;
}
