/*
 * exit: exit codes and error printing (cmd/exit.h).
 */
#include "cmd/exit.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/peers.h"
#include "engine/quote.h"

bool cmd_is_first_process(void)
{
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    return !r || strcmp(r, "0") == 0;
}

/* "PREFIX error: MSG" and "hint: HINT" on stderr, through zt_quote_message:
 * a message may quote a flag's value, a config key or a file's bytes that
 * no module escaped, and none of it reaches the terminal raw. */
static void cmd_put_error(const char *prefix, const char *msg, const char *hint)
{
    static char quoted[4 * 8192 + 1]; /* the status module's message slot, quoted */
    fprintf(stderr, "%serror: %s\n", prefix, zt_quote_message(quoted, sizeof quoted, msg));
    if (hint && hint[0])
        fprintf(stderr, "hint: %s\n", zt_quote_message(quoted, sizeof quoted, hint));
    fflush(stderr);
}

int cmd_usage_error(const char *fmt, ...)
{
    if (cmd_is_first_process()) {
        char msg[8192];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        cmd_put_error("zerotrain: ", msg, "run `zerotrain --help` for the list of flags");
    }
    return 2;
}

int cmd_exit_code(zt_status st)
{
    return st == ZT_ERR_USAGE || st == ZT_ERR_CONFIG || st == ZT_ERR_DATA ||
                   st == ZT_ERR_UNSUPPORTED || st == ZT_ERR_IO
               ? 2
               : 1;
}

void cmd_print_error(const zt_world *w)
{
    /* A failure an agreement brought from another rank names that rank. */
    int origin = zt_status_origin();
    const char *host = origin >= 0 && origin != w->rank ? zt_comm_peers_host(origin) : NULL;
    char prefix[128];
    snprintf(prefix, sizeof prefix, "[rank %d %s] ", host ? origin : w->rank, host ? host : w->host);
    cmd_put_error(prefix, zt_status_message(), zt_status_hint());
}

int cmd_agree(zt_world *w, zt_status local)
{
    /* A lost peer (this rank's failed transfer or watchdog, or the
     * agreement's own): the others cannot be waited for, in the agreement
     * or in MPI_Finalize, so the job ends here. */
    if (local == ZT_ERR_COMM) {
        cmd_print_error(w);
        MPI_Abort(w->comm, cmd_exit_code(local));
    }
    int first = -1;
    zt_status st = local;
    if (!zt_world_agreed_failure(local, &first))
        st = zt_world_agree(w, local, &first);
    if (st == ZT_OK)
        return 0;
    if (first < 0) {
        cmd_print_error(w);
        MPI_Abort(w->comm, cmd_exit_code(st));
    }
    if (w->rank == first)
        cmd_print_error(w);
    return cmd_exit_code(st);
}

int cmd_agreed_failure(zt_world *w, zt_status local)
{
    int rc = cmd_agree(w, local);
    return rc != 0 ? cmd_end(w, rc) : 0;
}

void cmd_fatal(const zt_world *w, zt_comm *comm, zt_status st)
{
    cmd_print_error(w);
    comm->ops->abort(comm, cmd_exit_code(st));
}

int cmd_world_start(zt_world *w, int *argc, char ***argv)
{
    zt_status st = zt_world_init(w, argc, argv);
    if (st != ZT_OK) {
        cmd_put_error("zerotrain: ", zt_status_message(), zt_status_hint());
        return 1;
    }
    return cmd_agreed_failure(w, w->env_status);
}

int cmd_local_failure(zt_status st)
{
    cmd_put_error("zerotrain: ", zt_status_message(), zt_status_hint());
    return cmd_exit_code(st);
}

int cmd_end(zt_world *w, int rc)
{
    zt_world_free(w);
    MPI_Finalize();
    return rc;
}

int cmd_finish(zt_world *w) { return cmd_end(w, 0); }
