/*
 * problem_ref: jansson's compact text of a problem, built as http.c built
 * it before problem.c (the keys in the same order), which problem_text
 * must match byte for byte. For test_problem and fuzz_body; malloc'd.
 */
#ifndef OTPD_PROBLEM_REF_H
#define OTPD_PROBLEM_REF_H

#include <stdio.h>

#include <jansson.h>

#include "../../src/http/problem.h"

static char *problem_ref_text(const struct problem *p)
{
    json_t *j = json_object();
    char type[128], *text;

    snprintf(type, sizeof(type), "urn:otpd:problem:%s", p->error);
    json_object_set_new(j, "type", json_string(type));
    json_object_set_new(j, "title", json_string(p->title));
    json_object_set_new(j, "status", json_integer(p->status));
    json_object_set_new(j, "detail", json_string(p->detail));
    json_object_set_new(j, "error", json_string(p->error));
    if (p->reason != NULL && p->reason[0])
        json_object_set_new(j, "reason", json_string(p->reason));
    if (p->retry_after_s > 0)
        json_object_set_new(j, "retry_after", json_integer(p->retry_after_s));
    if (p->show_attempts)
        json_object_set_new(j, "attempts_left", json_integer(p->attempts_left));
    text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return text;
}

#endif
