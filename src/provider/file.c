/*
 * file: the development sink. Each message becomes one JSON line in a file,
 * text included, so a developer can read the code there. Never for
 * production: the file holds live codes.
 */
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "../base/clock.h"
#include "provider.h"

struct file_sink {
    FILE *f;
};

static enum otp_rc file_prepare(void *self, const struct sms *m, struct provider_http *req, int *done,
                                struct provider_result *res)
{
    struct file_sink *fs = self;
    json_t *line = json_pack("{s:I, s:s, s:s, s:s}", "ts_ms", (json_int_t)clock_wall_ms(), "id", m->id, "to", m->to,
                             "text", m->text);
    int ok = line != NULL && json_dumpf(line, fs->f, JSON_COMPACT) == 0 && fputc('\n', fs->f) != EOF &&
             fflush(fs->f) == 0;

    (void)req;
    json_decref(line);
    *done = 1;
    /* A line that could not be written was not delivered: nothing billed. */
    provider_set_cause(res, ok ? PROVIDER_C_ACCEPTED : PROVIDER_C_UNSENT);
    if (!ok)
        snprintf(res->error, sizeof(res->error), "cannot write the sink file");
    return OTP_OK;
}

static void file_classify(void *self, long status, const char *body, size_t len, struct provider_result *res)
{
    (void)self, (void)body, (void)len;
    provider_classify_status(status, res);
}

static void file_free(void *self)
{
    struct file_sink *fs = self;

    if (fs && fs->f)
        fclose(fs->f);
    free(fs);
}

static const struct provider_ops file_ops = {"file", file_prepare, file_classify, file_free};

struct provider *provider_file_new(const struct provider_conf *c, char *err)
{
    struct file_sink *fs = calloc(1, sizeof(*fs));

    if (fs == NULL) {
        snprintf(err, OTP_ERR_LEN, "provider: out of memory");
        return NULL;
    }
    if ((fs->f = fopen(c->path, "a")) == NULL) {
        snprintf(err, OTP_ERR_LEN, "provider: cannot open %.200s", c->path);
        free(fs);
        return NULL;
    }
    return provider_wrap(&file_ops, fs, err);
}
