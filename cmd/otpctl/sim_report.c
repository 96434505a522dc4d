/*
 * otpctl simulate's report: the counts of a run (struct sim) as one JSON
 * object, per rule (refused, distinct keys, top keys, spend saved), per
 * other reason, the ledger's and the replay's decisions and where they
 * differ; and that object again as a table for people. Runs once, at the
 * end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../../src/base/config.h"
#include "sim_int.h"

static const char *const sim_other_names[SO_N] = {"cost_cap", "number_type", "country_blocked",
                                                  "suspected_pumping", "other"};

/* {"n": .., "key": "..."} of the top keys of one rule. */
static json_t *sim_top_json(const struct sim_bucket *b, int top)
{
    json_t *arr = json_array();
    struct tally_entry **e;
    size_t n, i;

    if (b->keys == NULL || (e = tally_sorted(b->keys, &n)) == NULL)
        return arr;
    for (i = 0; i < n && i < (size_t)top; i++)
        json_array_append_new(arr, json_pack("{s:s, s:I, s:I}", "key", e[i]->label, "refused", (json_int_t)e[i]->n,
                                             "spend_saved_minor", (json_int_t)e[i]->spend_minor));
    free(e);
    return arr;
}

static json_t *sim_tally_json(const struct tally *t)
{
    json_t *o = json_object();
    struct tally_entry **e = NULL;
    size_t n, i;

    if ((e = tally_sorted(t, &n)) != NULL)
        for (i = 0; i < n; i++)
            json_object_set_new(o, e[i]->key, json_integer(e[i]->n));
    free(e);
    return o;
}

json_t *sim_json(const struct sim *s, int top)
{
    json_t *root = json_object(), *rules = json_object(), *other = json_object(), *changes = json_array();
    struct tally_entry **e;
    int64_t saved = 0;
    size_t i, n;

    for (i = 0; i < s->cfg->limits.n_rules; i++) {
        const struct sim_bucket *b = &s->rules[i];
        json_t *r = json_object();
        json_object_set_new(r, "mode", json_string(s->cfg->limits.rules[i].shadow ? "shadow" : "enforce"));
        json_object_set_new(r, "refused", json_integer(b->refused));
        json_object_set_new(r, "keys", json_integer((json_int_t)tally_size(b->keys)));
        json_object_set_new(r, "spend_saved_minor", json_integer(b->spend_saved));
        json_object_set_new(r, "top", sim_top_json(b, top));
        json_object_set_new(rules, s->cfg->limits.rules[i].name, r);
        saved += b->spend_saved;
    }
    for (i = 0; i < SO_N; i++) {
        json_object_set_new(other, sim_other_names[i],
                            json_pack("{s:I, s:I}", "refused", (json_int_t)s->other[i].refused, "spend_saved_minor",
                                      (json_int_t)s->other[i].spend_saved));
        saved += s->other[i].spend_saved;
    }
    if ((e = tally_sorted(s->changes, &n)) != NULL) {
        for (i = 0; i < n; i++) {
            const char *sep = strchr(e[i]->key, '\x1f');
            json_array_append_new(changes, json_pack("{s:s%, s:s, s:I}", "ledger", e[i]->key,
                                                     (size_t)(sep - e[i]->key), "simulated", sep + 1, "requests",
                                                     (json_int_t)e[i]->n));
        }
        free(e);
    }
    json_object_set_new(root, "requests", json_integer(s->requests));
    json_object_set_new(root, "issues", json_integer(s->issues));
    json_object_set_new(root, "verifies", json_integer(s->verifies));
    json_object_set_new(root, "skipped", json_integer(s->skipped));
    json_object_set_new(root, "rules", rules);
    json_object_set_new(root, "other", other);
    json_object_set_new(root, "spend_saved_minor", json_integer(saved));
    json_object_set_new(root, "ledger", json_pack("{s:o, s:I}", "decisions", sim_tally_json(s->ledger_dec),
                                                  "spend_minor", (json_int_t)s->ledger_spend));
    json_object_set_new(root, "simulated", json_pack("{s:o}", "decisions", sim_tally_json(s->sim_dec)));
    json_object_set_new(root, "agree", json_integer(s->agree));
    json_object_set_new(root, "changes", changes);
    if (s->cfg->limits.currency[0])
        json_object_set_new(root, "currency", json_string(s->cfg->limits.currency));
    return root;
}

/* "accepted 8, rate_limited 2" from a {decision: n} object. */
static void sim_print_counts(const char *head, json_t *o)
{
    void *it;
    int first = 1;

    printf("%-10s", head);
    for (it = json_object_iter(o); it; it = json_object_iter_next(o, it)) {
        printf("%s%s %lld", first ? "" : ", ", json_object_iter_key(it),
               (long long)json_integer_value(json_object_iter_value(it)));
        first = 0;
    }
    printf("%s\n", first ? "-" : "");
}

/* The same figures for people: a summary, then one line per rule. */
void sim_print_table(json_t *root)
{
    json_t *rules = json_object_get(root, "rules"), *other = json_object_get(root, "other"), *r, *t, *c;
    json_t *changes = json_object_get(root, "changes");
    const char *name;
    void *it;
    size_t i;

    printf("requests  %lld (issues %lld, verifies %lld; skipped %lld)\n",
           (long long)json_integer_value(json_object_get(root, "requests")),
           (long long)json_integer_value(json_object_get(root, "issues")),
           (long long)json_integer_value(json_object_get(root, "verifies")),
           (long long)json_integer_value(json_object_get(root, "skipped")));
    sim_print_counts("ledger", json_object_get(json_object_get(root, "ledger"), "decisions"));
    sim_print_counts("simulated", json_object_get(json_object_get(root, "simulated"), "decisions"));
    printf("spend     %lld in the ledger, %lld on requests the new rules refuse\n",
           (long long)json_integer_value(json_object_get(json_object_get(root, "ledger"), "spend_minor")),
           (long long)json_integer_value(json_object_get(root, "spend_saved_minor")));
    printf("agree     %lld\n", (long long)json_integer_value(json_object_get(root, "agree")));
    for (i = 0; (c = json_array_get(changes, i)) != NULL; i++)
        printf("changed   %s -> %s: %lld\n", json_string_value(json_object_get(c, "ledger")),
               json_string_value(json_object_get(c, "simulated")),
               (long long)json_integer_value(json_object_get(c, "requests")));
    printf("\n%-32s %-8s %8s %6s %12s  %s\n", "RULE", "MODE", "REFUSED", "KEYS", "SPEND_SAVED", "TOP");
    for (it = json_object_iter(rules); it; it = json_object_iter_next(rules, it)) {
        name = json_object_iter_key(it);
        r = json_object_iter_value(it);
        printf("%-32s %-8s %8lld %6lld %12lld  ", name, json_string_value(json_object_get(r, "mode")),
               (long long)json_integer_value(json_object_get(r, "refused")),
               (long long)json_integer_value(json_object_get(r, "keys")),
               (long long)json_integer_value(json_object_get(r, "spend_saved_minor")));
        for (i = 0; (t = json_array_get(json_object_get(r, "top"), i)) != NULL; i++)
            printf("%s%s (%lld)", i ? ", " : "", json_string_value(json_object_get(t, "key")),
                   (long long)json_integer_value(json_object_get(t, "refused")));
        printf("%s\n", json_array_size(json_object_get(r, "top")) ? "" : "-");
    }
    for (it = json_object_iter(other); it; it = json_object_iter_next(other, it)) {
        r = json_object_iter_value(it);
        printf("%-32s %-8s %8lld %6s %12lld  -\n", json_object_iter_key(it), "-",
               (long long)json_integer_value(json_object_get(r, "refused")), "-",
               (long long)json_integer_value(json_object_get(r, "spend_saved_minor")));
    }
}
