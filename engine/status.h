/*
 * status: error reporting for every fallible call in zerotrain.
 *
 * Functions return zt_status; on failure they record one message (what went
 * wrong) and an optional hint (what to do about it) in a per-thread slot, with
 * the file, line and rank of the check that failed. Only cmd/ reads the slot,
 * prints it as "[rank R host] error: WHAT" + "hint: ..." and exits or aborts.
 *
 * Memory: the message slot is static per-thread storage; nothing to free.
 * Collective: none.
 */
#ifndef ZT_STATUS_H
#define ZT_STATUS_H

#include <stdarg.h>

typedef enum {
    ZT_OK = 0,
    ZT_ERR_USAGE,       /* bad command-line flag or value (exit code 2) */
    ZT_ERR_CONFIG,      /* bad JSON config */
    ZT_ERR_IO,          /* file missing, unreadable, unwritable */
    ZT_ERR_DATA,        /* malformed data file */
    ZT_ERR_OOM,         /* allocation failed or arena exhausted */
    ZT_ERR_COMM,        /* MPI/NCCL failure */
    ZT_ERR_DEVICE,      /* backend/device failure */
    ZT_ERR_UNSUPPORTED, /* valid request that is not implemented (yet) */
    ZT_ERR_NUMERIC,     /* loss scale underflow, nan loss, ... */
    ZT_ERR_INTERNAL     /* a bug: an invariant did not hold */
} zt_status;

/* Rank stamped into messages; set once by world. -1 before MPI is up. */
void zt_status_set_rank(int rank);

/* Records the failure; returns st so callers can `return zt_fail(...)`. */
zt_status zt_fail_at(zt_status st, const char *file, int line, const char *hint,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Records a failure that rank `origin` recorded first, as an agreement
 * received it (its message and hint): every rank then holds the same
 * message, and cmd/ prints it under the rank it came from, whichever rank
 * prints (engine/world/world.h's zt_world_agree). */
zt_status zt_fail_from(zt_status st, int origin, const char *hint, const char *msg);

/* The rank whose failure this thread's slot holds: -1 for this rank's own
 * (zt_fail), else the origin given to zt_fail_from. */
int zt_status_origin(void);

/* The recorded failure of this thread; hint may be "" when none was given. */
const char *zt_status_message(void);
const char *zt_status_hint(void);
const char *zt_status_where(void); /* "file:line" of the check */
int zt_status_rank(void);
const char *zt_status_name(zt_status st);
void zt_status_clear(void);

#define zt_fail(st, hint, ...) zt_fail_at((st), __FILE__, __LINE__, (hint), __VA_ARGS__)

/* Propagate a failure upward unchanged (the first recorded message wins). */
#define ZT_TRY(expr)                   \
    do {                               \
        zt_status zt_try_st_ = (expr); \
        if (zt_try_st_ != ZT_OK)       \
            return zt_try_st_;         \
    } while (0)

/* Propagate after running cleanup code; `label` is a goto target. */
#define ZT_TRY_GOTO(st, expr, label) \
    do {                             \
        (st) = (expr);               \
        if ((st) != ZT_OK)           \
            goto label;              \
    } while (0)

#endif
