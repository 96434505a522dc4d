/*
 * spawn_slow: an LD_PRELOAD shim for tests/integration/test_http_hostile.py.
 * Every pthread_create returns SPAWN_SLOW_MS milliseconds (default 200)
 * after the thread started, which widens a race between a thread and what
 * its creator does right after creating it from nanoseconds to that long:
 * otpd's accepting thread on listen_internal served requests before
 * http_new had noted that daemon, so they were routed as if there were no
 * internal listener.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    const char *ms = getenv("SPAWN_SLOW_MS");
    int rc;

    if (real == NULL)
        *(void **)&real = dlsym(RTLD_NEXT, "pthread_create");
    rc = real(t, attr, fn, arg);
    if (rc == 0)
        usleep((useconds_t)(ms ? strtol(ms, NULL, 10) : 200) * 1000u);
    return rc;
}
