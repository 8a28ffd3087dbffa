/*
 * worker: the MPI communicator's comm thread (engine/comm/worker.h).
 */
#include "engine/comm/worker.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <time.h>

static struct {
    pthread_once_t once;
    pthread_mutex_t lock;
    pthread_cond_t work; /* tasks queued, or stop */
    pthread_cond_t done; /* a task finished */
    zt_comm_task *head, *tail;
    pthread_t thread;
    bool running, stop;
    int users;
} worker = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

/* Condition variables on the monotonic clock: a wall-clock step must not
 * shorten or stretch the watchdog. */
static void worker_init_once(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&worker.work, &a);
    pthread_cond_init(&worker.done, &a);
    pthread_condattr_destroy(&a);
}

static void *worker_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&worker.lock);
    for (;;) {
        while (!worker.head && !worker.stop)
            pthread_cond_wait(&worker.work, &worker.lock);
        if (!worker.head)
            break;
        zt_comm_task *t = worker.head;
        worker.head = t->next;
        if (!worker.head)
            worker.tail = NULL;
        pthread_mutex_unlock(&worker.lock);
        int rc = t->run(t);
        pthread_mutex_lock(&worker.lock);
        t->rc = rc;
        t->queued = false;
        t->done = true;
        pthread_cond_broadcast(&worker.done);
    }
    pthread_mutex_unlock(&worker.lock);
    return NULL;
}

bool zt_comm_worker_acquire(void)
{
    pthread_once(&worker.once, worker_init_once);
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    pthread_mutex_lock(&worker.lock);
    bool ok = true;
    if (worker.users == 0 && level == MPI_THREAD_MULTIPLE) {
        worker.stop = false;
        worker.running = pthread_create(&worker.thread, NULL, worker_main, NULL) == 0;
        ok = worker.running;
    }
    if (ok)
        worker.users++;
    pthread_mutex_unlock(&worker.lock);
    return ok;
}

void zt_comm_worker_release(void)
{
    pthread_mutex_lock(&worker.lock);
    bool join = --worker.users == 0 && worker.running;
    if (join) {
        worker.stop = true;
        pthread_cond_signal(&worker.work);
    }
    pthread_mutex_unlock(&worker.lock);
    if (join) {
        pthread_join(worker.thread, NULL);
        worker.running = false;
    }
}

void zt_comm_worker_submit(zt_comm_task *t)
{
    t->next = NULL;
    t->done = false;
    t->rc = MPI_SUCCESS;
    pthread_mutex_lock(&worker.lock);
    if (!worker.running) {
        pthread_mutex_unlock(&worker.lock);
        t->rc = t->run(t);
        t->done = true;
        return;
    }
    t->queued = true;
    if (worker.tail)
        worker.tail->next = t;
    else
        worker.head = t;
    worker.tail = t;
    pthread_cond_signal(&worker.work);
    pthread_mutex_unlock(&worker.lock);
}

bool zt_comm_worker_done(zt_comm_task *t)
{
    pthread_mutex_lock(&worker.lock);
    bool done = t->done;
    pthread_mutex_unlock(&worker.lock);
    return done;
}

bool zt_comm_worker_wait(zt_comm_task *t, double seconds)
{
    /* ZT_COMM_TIMEOUT is bounded where it is parsed (engine/env.h); the
     * clamp keeps the deadline a valid timespec whatever a caller passes.
     * Past time_t's range the cast is undefined, and a negative tv_nsec
     * makes pthread_cond_timedwait fail at once with EINVAL, again and
     * again, in a loop that holds the lock the comm thread needs. */
    if (seconds > 1e9 || isnan(seconds))
        seconds = 1e9;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    if (seconds > 0) {
        double whole = (double)(int64_t)seconds;
        until.tv_sec += (time_t)whole;
        until.tv_nsec += (long)((seconds - whole) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&worker.lock);
    while (!t->done) {
        if (seconds <= 0) {
            pthread_cond_wait(&worker.done, &worker.lock);
            continue;
        }
        /* Any failure but a spurious wake ends the wait as a timeout would:
         * the watchdog then reports, where a retry could only spin. */
        int rc = pthread_cond_timedwait(&worker.done, &worker.lock, &until);
        if (rc != 0 && rc != EINTR)
            break;
    }
    bool done = t->done;
    pthread_mutex_unlock(&worker.lock);
    return done;
}
