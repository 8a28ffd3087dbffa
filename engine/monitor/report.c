/*
 * report: the --report JSON (engine/monitor/report.h).
 */
#include "engine/monitor/report.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "data/datamem.h"
#include "engine/monitor/profile.h"

static const char *const report_group_names[ZT_STAGE_GROUP_N] = {
    "world", "hpz", "mics_shard", "mics_replica", "qgz_intra", "qgz_inter"};

/* JSON has no NaN or infinity: a diverged run reports null there. */
static json_t *report_real(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* What each rank contributes to the report, gathered to rank 0. */
typedef struct {
    char host[64];
    uint64_t mem[ZT_MEM_NLOC][ZT_MEM_NCLASS][4]; /* current, peak, avg, reserved */
    uint64_t comm_bytes[ZT_STAGE_GROUP_N][ZT_COMM_NKINDS];
    uint64_t comm_calls[ZT_STAGE_GROUP_N][ZT_COMM_NKINDS];
    int has_group[ZT_STAGE_GROUP_N];
    int group_hosts[ZT_STAGE_GROUP_N]; /* hosts the group's ranks run on */
    uint64_t total[ZT_MEM_NLOC][2]; /* all classes at once: current, peak */
    int64_t gather_peak_live;
    int has_nvme;
    zt_swap_stats nvme_io[3]; /* optimizer, parameters, gradients */
    int64_t nvme_files[4];    /* swap file bytes of PARAMS, GRADS, MASTER, OPTIM */
    /* Pipeline: this rank's stage, its measured schedule (per timed step) and
     * its point-to-point traffic, counted and as its program states it. */
    int pipe_stage, pipe_dp_rank, pipe_slots, pipe_in_flight_max;
    int64_t pipe_steps;
    double pipe_fwd_s, pipe_bwd_s, pipe_idle_s, pipe_step_s;
    uint64_t pipe_bytes[ZT_COMM_NKINDS], pipe_calls[ZT_COMM_NKINDS];
    uint64_t pipe_sent_per_step, pipe_recv_per_step;
    int pipe_hosts;
} report_rank_stats;

/* How many hosts the ranks of c run on: their host indices gathered over c.
 * A group on one host moved none of its bytes between hosts. Collective over
 * c; 0 when they cannot be gathered. */
static int report_group_hosts(const zt_comm *c, int host_index)
{
    int *all = calloc((size_t)c->size, sizeof *all), n = 0;
    MPI_Request r;
    if (all && zt_comm_mpi_wait(c->side,
                                MPI_Iallgather(&host_index, 1, MPI_INT, all, 1, MPI_INT, c->side,
                                               &r),
                                &r, "all_gather of the hosts' indices", 1) == ZT_OK)
        for (int i = 0; i < c->size; i++) {
            int seen = 0;
            for (int j = 0; j < i && !seen; j++)
                seen = all[j] == all[i];
            n += !seen;
        }
    free(all);
    return n;
}

static const zt_mem_class report_nvme_classes[4] = {ZT_MEM_PARAMS, ZT_MEM_GRADS, ZT_MEM_MASTER,
                                                    ZT_MEM_OPTIM};

static json_t *report_swap_json(const zt_swap_stats *io)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o}", "bytes_read",
                     (json_int_t)io->bytes_read, "bytes_written", (json_int_t)io->bytes_written,
                     "reads", (json_int_t)io->reads, "writes", (json_int_t)io->writes, "gets",
                     (json_int_t)io->gets, "hits", (json_int_t)io->hits, "prefetches",
                     (json_int_t)io->prefetches, "wait_seconds", report_real(io->wait_seconds));
}

/* The run's nvme plan (rank 0's; every rank plans alike), or null. */
static json_t *report_nvme_json(const zt_trainer *t)
{
    zt_trainer_nvme_stats n;
    zt_trainer_nvme_stats_get(t, &n);
    if (!n.optimizer && !n.param)
        return json_null();
    return json_pack("{s:s?, s:b, s:i, s:i, s:i, s:i, s:I, s:I, s:I}", "engine", n.engine,
                     "direct", n.direct, "sub_groups", n.n_groups, "sub_groups_in_memory",
                     n.opt_slots, "swapped_param_units", n.n_param_swapped, "param_buffers",
                     n.param_buffers, "param_in_cpu_params", (json_int_t)n.param_in_cpu_numel,
                     "swap_buffer_bytes", (json_int_t)n.swap_bytes, "swap_file_bytes",
                     (json_int_t)n.disk_bytes);
}

static json_t *report_kinds(const uint64_t *v)
{
    json_t *o = json_object();
    for (int k = 0; k < ZT_COMM_NKINDS; k++)
        json_object_set_new(o, zt_comm_kind_name((zt_comm_kind)k), json_integer((json_int_t)v[k]));
    return o;
}

/* Seconds per timed step (NAN before any). */
static double report_per_step(double s, int64_t steps) { return steps > 0 ? s / (double)steps : NAN; }

static json_t *report_rank_pipe_json(const report_rank_stats *r)
{
    int64_t n = r->pipe_steps;
    return json_pack("{s:i, s:i, s:i, s:i, s:I, s:o, s:o, s:o, s:o, s:o, s:I, s:I}", "stage",
                     r->pipe_stage, "dp_rank", r->pipe_dp_rank, "slots", r->pipe_slots,
                     "in_flight_max", r->pipe_in_flight_max, "timed_steps", (json_int_t)n,
                     "forward_s", report_real(report_per_step(r->pipe_fwd_s, n)), "backward_s",
                     report_real(report_per_step(r->pipe_bwd_s, n)), "idle_s",
                     report_real(report_per_step(r->pipe_idle_s, n)), "step_s",
                     report_real(report_per_step(r->pipe_step_s, n)), "bubble_fraction",
                     report_real(r->pipe_step_s > 0 ? r->pipe_idle_s / r->pipe_step_s : NAN),
                     "p2p_sent_bytes_per_step", (json_int_t)r->pipe_sent_per_step,
                     "p2p_recv_bytes_per_step", (json_int_t)r->pipe_recv_per_step);
}

static json_t *report_rank_json(int rank, const report_rank_stats *r, bool pipelined)
{
    json_t *mem = json_object();
    for (int l = 0; l < ZT_MEM_NLOC; l++) {
        json_t *loc = json_object();
        for (int c = 0; c < ZT_MEM_NCLASS; c++)
            json_object_set_new(loc, zt_mem_class_name((zt_mem_class)c),
                                json_pack("{s:I, s:I, s:I, s:I}", "current",
                                      (json_int_t)r->mem[l][c][0], "peak",
                                      (json_int_t)r->mem[l][c][1], "avg",
                                      (json_int_t)r->mem[l][c][2], "reserved",
                                      (json_int_t)r->mem[l][c][3]));
        json_object_set_new(mem, zt_mem_loc_name((zt_mem_loc)l), loc);
    }
    /* What the nvme offload moved out of host memory: the swap files are
     * allocated whole when the run starts and kept until it ends. */
    json_t *files = json_object();
    int64_t files_total = 0;
    for (int i = 0; i < 4; i++) {
        json_object_set_new(files, zt_mem_class_name(report_nvme_classes[i]),
                            json_integer((json_int_t)r->nvme_files[i]));
        files_total += r->nvme_files[i];
    }
    json_object_set_new(mem, "nvme", files);
    json_t *mem_total = json_object();
    for (int l = 0; l < ZT_MEM_NLOC; l++)
        json_object_set_new(mem_total, zt_mem_loc_name((zt_mem_loc)l),
                            json_pack("{s:I, s:I}", "current", (json_int_t)r->total[l][0], "peak",
                                      (json_int_t)r->total[l][1]));
    json_object_set_new(mem_total, "nvme", json_integer((json_int_t)files_total));
    uint64_t total[ZT_COMM_NKINDS];
    memset(total, 0, sizeof total);
    for (int gi = 0; gi < ZT_STAGE_GROUP_N; gi++)
        for (int k = 0; k < ZT_COMM_NKINDS; k++)
            total[k] += r->comm_bytes[gi][k];
    json_t *groups = json_object();
    for (int gi = 0; gi < ZT_STAGE_GROUP_N; gi++)
        if (r->has_group[gi])
            json_object_set_new(groups, report_group_names[gi],
                            json_pack("{s:o, s:o, s:i}", "bytes", report_kinds(r->comm_bytes[gi]),
                                      "calls", report_kinds(r->comm_calls[gi]), "hosts",
                                      r->group_hosts[gi]));
    json_t *nvme = r->has_nvme ? json_pack("{s:o, s:o, s:o}", "optimizer",
                                           report_swap_json(&r->nvme_io[0]), "param",
                                           report_swap_json(&r->nvme_io[1]), "gradient",
                                           report_swap_json(&r->nvme_io[2]))
                               : json_null();
    if (pipelined)
        json_object_set_new(groups, "pipe",
                            json_pack("{s:o, s:o, s:i}", "bytes", report_kinds(r->pipe_bytes),
                                      "calls", report_kinds(r->pipe_calls), "hosts",
                                      r->pipe_hosts));
    return json_pack("{s:i, s:s, s:o, s:o, s:o, s:o, s:I, s:o, s:o}", "rank", rank, "host",
                     r->host, "memory_bytes", mem, "memory_total_bytes", mem_total,
                     "comm_bytes", report_kinds(total), "comm", groups,
                     "gather_peak_live_params", (json_int_t)r->gather_peak_live, "nvme", nvme,
                     "pipeline", report_rank_pipe_json(r));
}

/* The stage policy's properties and its statement of this run's memory and
 * traffic (what the measured counters must show). */
static json_t *report_policy_json(const zt_trainer_stats *s)
{
    const zt_stage_policy *p = s->policy;
    json_t *mem = json_object();
    static const zt_mem_class states[] = {ZT_MEM_PARAMS, ZT_MEM_GRADS, ZT_MEM_MASTER,
                                          ZT_MEM_OPTIM};
    for (int l = 0; l < ZT_MEM_NLOC; l++) {
        json_t *loc = json_object();
        for (size_t k = 0; k < sizeof states / sizeof *states; k++)
            json_object_set_new(loc, zt_mem_class_name(states[k]),
                                json_integer((json_int_t)s->expected_memory.bytes[l][states[k]]));
        json_object_set_new(mem, zt_mem_loc_name((zt_mem_loc)l), loc);
    }
    json_t *traffic = json_object(), *traffic_bytes = json_object();
    for (int g = 0; g < ZT_STAGE_GROUP_N; g++) {
        json_t *kinds = json_object(), *kind_bytes = json_object();
        for (int k = 0; k < ZT_COMM_NKINDS; k++) {
            const char *name = zt_comm_kind_name((zt_comm_kind)k);
            json_object_set_new(kinds, name,
                                json_integer((json_int_t)s->expected_traffic.elements[g][k]));
            json_object_set_new(kind_bytes, name,
                                json_integer((json_int_t)s->expected_traffic.bytes[g][k]));
        }
        json_object_set_new(traffic, report_group_names[g], kinds);
        json_object_set_new(traffic_bytes, report_group_names[g], kind_bytes);
    }
    return json_pack("{s:b, s:b, s:b, s:b, s:b, s:o, s:o, s:o, s:b}", "optimizer_sharded",
                     p->optimizer_sharded, "grads_sharded", p->grads_sharded, "params_sharded",
                     p->params_sharded, "allgather_after_step", p->allgather_after_step,
                     "reduce_every_micro_step", p->reduce_every_micro_step, "memory_bytes", mem,
                     "elements_per_step", traffic, "bytes_per_step", traffic_bytes,
                     "elements_exact", s->expected_traffic.exact);
}

static void report_pipe_mine(const zt_trainer_stats *s, report_rank_stats *r)
{
    const zt_pipe *p = s->pipe;
    /* The timed steps (DeepSpeed's timer skips two), or all of a short run. */
    const zt_pipe_times *t = p->timed.steps > 0 ? &p->timed : &p->all;
    r->pipe_stage = p->stage;
    r->pipe_dp_rank = p->dp_rank;
    r->pipe_slots = zt_pipe_slots(p);
    r->pipe_in_flight_max = p->in_flight_max;
    r->pipe_steps = t->steps;
    r->pipe_fwd_s = t->fwd_s;
    r->pipe_bwd_s = t->bwd_s;
    r->pipe_idle_s = t->idle_s;
    r->pipe_step_s = t->step_s;
    if (s->pipe_group) {
        memcpy(r->pipe_bytes, s->pipe_group->bytes, sizeof r->pipe_bytes);
        memcpy(r->pipe_calls, s->pipe_group->calls, sizeof r->pipe_calls);
    }
    zt_pipe_traffic(p, &r->pipe_sent_per_step, &r->pipe_recv_per_step);
}

/* The pipeline section: the partition, the schedule's ideal bubble
 * (P - 1) / (M + P - 1), and per stage what its replicas measured (times
 * averaged over them, memory peaks their largest). */
static json_t *report_pipe_json(const zt_trainer_stats *s, const report_rank_stats *all)
{
    const zt_pipe *p = s->pipe;
    const zt_model *m = p->model;
    json_t *stages = json_array();
    for (int st = 0; st < p->stages; st++) {
        int64_t params = 0;
        for (int u = p->bounds[st]; u < p->bounds[st + 1]; u++)
            params += m->units[u].param_numel;
        double sum[4] = {0};
        int64_t steps = 0;
        uint64_t acts_peak = 0, total_peak = 0;
        int in_flight = 0, slots = 0;
        for (int d = 0; d < p->dp_size; d++) {
            const report_rank_stats *r = &all[zt_pipe_world_rank(p, st, d)];
            double per[4] = {r->pipe_fwd_s, r->pipe_bwd_s, r->pipe_idle_s, r->pipe_step_s};
            for (int k = 0; k < 4; k++)
                sum[k] += report_per_step(per[k], r->pipe_steps) / p->dp_size;
            steps = r->pipe_steps;
            for (int l = 0; l < ZT_MEM_NLOC; l++) {
                if (r->mem[l][ZT_MEM_ACTS][1] > acts_peak)
                    acts_peak = r->mem[l][ZT_MEM_ACTS][1];
                if (r->total[l][1] > total_peak)
                    total_peak = r->total[l][1];
            }
            in_flight = r->pipe_in_flight_max > in_flight ? r->pipe_in_flight_max : in_flight;
            slots = r->pipe_slots;
        }
        json_array_append_new(
            stages, json_pack("{s:i, s:[i, i], s:I, s:i, s:i, s:I, s:I, s:I, s:o, s:o, s:o, s:o, "
                              "s:o}",
                              "stage", st, "units", p->bounds[st], p->bounds[st + 1], "params",
                              (json_int_t)params, "slots", slots, "in_flight_max", in_flight,
                              "acts_peak_bytes", (json_int_t)acts_peak, "memory_peak_bytes",
                              (json_int_t)total_peak, "timed_steps", (json_int_t)steps,
                              "forward_s", report_real(sum[0]), "backward_s",
                              report_real(sum[1]), "idle_s", report_real(sum[2]), "step_s",
                              report_real(sum[3]), "bubble_fraction",
                              report_real(sum[3] > 0 ? sum[2] / sum[3] : NAN)));
    }
    double mb = (double)p->micro_batches;
    return json_pack("{s:i, s:i, s:s, s:s, s:I, s:f, s:o}", "stages", p->stages,
                     "data_parallel", p->dp_size, "partition_method", p->partition, "schedule",
                     zt_pipe_schedule_name(p->schedule), "micro_batches",
                     (json_int_t)p->micro_batches, "bubble_fraction_ideal",
                     (p->stages - 1) / (mb + p->stages - 1), "per_stage", stages);
}

zt_status zt_report_write(const char *path, const zt_trainer *t, double param_norm)
{
    zt_trainer_stats stats;
    zt_trainer_stats_get(t, &stats);
    const zt_trainer_stats *s = &stats;
    const zt_world *w = s->world;
    const zt_config *cfg = s->cfg;
    zt_memory *mem = s->mem;
    const zt_comm *const *groups = s->groups;
    report_rank_stats mine;
    memset(&mine, 0, sizeof mine);
    snprintf(mine.host, sizeof mine.host, "%s", w->host);
    for (int l = 0; l < ZT_MEM_NLOC; l++)
        for (int c = 0; c < ZT_MEM_NCLASS; c++) {
            zt_mem_stats s = zt_arena_stats(zt_memory_arena(mem, (zt_mem_loc)l, (zt_mem_class)c));
            mine.mem[l][c][0] = s.current;
            mine.mem[l][c][1] = s.peak;
            mine.mem[l][c][2] = s.avg;
            mine.mem[l][c][3] = s.reserved;
        }
    for (int l = 0; l < ZT_MEM_NLOC; l++) {
        mine.total[l][0] = mem->total_current[l];
        mine.total[l][1] = mem->total_peak[l];
    }
    for (int gi = 0; gi < ZT_STAGE_GROUP_N; gi++)
        if (groups[gi]) {
            mine.has_group[gi] = 1;
            memcpy(mine.comm_bytes[gi], groups[gi]->bytes, sizeof groups[gi]->bytes);
            memcpy(mine.comm_calls[gi], groups[gi]->calls, sizeof groups[gi]->calls);
            mine.group_hosts[gi] = report_group_hosts(groups[gi], w->host_index);
        }
    mine.gather_peak_live = s->gather_peak_live_params;
    zt_trainer_nvme_stats nv;
    zt_trainer_nvme_stats_get(t, &nv);
    mine.has_nvme = nv.optimizer || nv.param;
    mine.nvme_io[0] = nv.opt_io;
    mine.nvme_io[1] = nv.param_io;
    mine.nvme_io[2] = nv.grad_io;
    mine.nvme_files[0] = nv.param_file_bytes;
    mine.nvme_files[1] = nv.grad_file_bytes;
    mine.nvme_files[2] = nv.master_file_bytes;
    mine.nvme_files[3] = nv.optim_file_bytes;
    report_pipe_mine(s, &mine);
    if (s->pipe_group)
        mine.pipe_hosts = report_group_hosts(s->pipe_group, w->host_index);
    report_rank_stats *all = NULL;
    if (w->rank == 0) {
        all = calloc((size_t)w->size, sizeof *all);
        if (!all)
            return zt_world_agree(w, zt_fail(ZT_ERR_OOM, "", "cannot gather report"), NULL);
    }
    MPI_Request r;
    zt_status st = zt_comm_mpi_wait(w->comm,
                                    MPI_Igather(&mine, (int)sizeof mine, MPI_BYTE, all,
                                                (int)sizeof mine, MPI_BYTE, 0, w->comm, &r),
                                    &r, "gather of the ranks' report figures",
                                    (int64_t)sizeof mine);
    if (st != ZT_OK) {
        free(all);
        return st;
    }
    if (w->rank == 0) {
        json_t *loss = json_array();
        int64_t n_loss = s->global_steps;
        for (int64_t i = 0; i < n_loss; i++)
            json_array_append_new(loss, report_real(s->loss_history[i]));
        json_t *ranks = json_array();
        for (int i = 0; i < w->size; i++)
            json_array_append_new(ranks, report_rank_json(i, &all[i], s->pipe->stages > 1));
        json_t *doc = json_pack(
            "{s:s, s:{s:s, s:I}, s:i, s:s, s:i, s:s, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:o, "
            "s:o, s:o, s:o}",
            "zerotrain_version", ZT_VERSION, "model", "name", s->model->name, "params",
            (json_int_t)s->model->n_params, "world_size", w->size, "device", s->device, "stage",
            cfg->zero.stage, "precision", zt_dtype_name(s->compute_dtype), "train_batch_size",
            (json_int_t)cfg->train_batch_size, "micro_batch_size",
            (json_int_t)cfg->micro_batch_size, "gradient_accumulation_steps",
            (json_int_t)cfg->gradient_accumulation_steps, "steps", (json_int_t)s->global_steps,
            "skipped_steps", (json_int_t)s->skipped_steps, "loss_history", loss, "final_loss",
            report_real(n_loss > 0 ? s->loss_history[n_loss - 1] : NAN), "samples_per_sec",
            report_real(s->samples_per_sec), "param_norm", report_real(param_norm),
            "train_seconds", report_real(s->train_seconds), "ranks", ranks);
        const zt_zero_config *z = &cfg->zero;
        json_t *zero = json_pack(
            "{s:i, s:I, s:I, s:I, s:I, s:I, s:b, s:I, s:I, s:b, s:b}", "stage", z->stage,
            "padded_params", (json_int_t)s->layout->padded_numel, "partition_params",
            (json_int_t)s->layout->partition_numel, "persistent_params",
            (json_int_t)s->layout->persistent_numel, "hpz_partition_size",
            (json_int_t)z->zero_hpz_partition_size, "mics_shard_size",
            (json_int_t)(z->mics_shard_size > 0 ? z->mics_shard_size : 0), "overlap_comm",
            z->overlap_comm,
            "reduce_bucket_size", (json_int_t)z->reduce_bucket_size, "allgather_bucket_size",
            (json_int_t)z->allgather_bucket_size, "reduce_scatter", z->reduce_scatter,
            "allgather_partitions", z->allgather_partitions);
        if (zero) {
            json_object_set_new(zero, "policy", report_policy_json(s));
            /* ZeRO++: what was asked, and whether qgZ ran (it needs nodes). */
            json_object_set_new(zero, "quantized_weights",
                                json_boolean(z->zero_quantized_weights));
            json_object_set_new(zero, "quantized_gradients",
                                json_boolean(z->zero_quantized_gradients));
            const zt_comm *intra = groups[ZT_STAGE_GROUP_QGZ_INTRA];
            const zt_comm *inter = groups[ZT_STAGE_GROUP_QGZ_INTER];
            json_object_set_new(zero, "qgz_active", json_boolean(inter != NULL));
            json_object_set_new(zero, "qgz_ranks_per_node",
                                json_integer(intra ? intra->size : inter ? 1 : 0));
        }
        json_t *scales = json_null();
        if (cfg->fp16.enabled) {
            scales = json_array();
            for (int64_t i = 0; i < n_loss; i++)
                json_array_append_new(scales, report_real(s->scale_history[i]));
        }
        json_t *extra = json_pack(
            "{s:o, s:{s:s, s:s, s:s}, s:{s:s, s:s}, s:{s:I, s:b}}", "loss_scale_history", scales,
            "mixed_precision", "grad_dtype", zt_dtype_name(s->grad_dtype), "comm_dtype",
            zt_dtype_name(s->comm_dtype), "units",
            zt_dtype_name(s->typed_units ? s->compute_dtype : ZT_F32), "offload", "optimizer",
            s->nvme_optimizer ? "nvme" : s->offload_optimizer ? "cpu" : "none", "param",
            s->nvme_param ? "nvme" : s->offload_param ? "cpu" : "none",
            "activation_checkpointing", "interval", (json_int_t)s->checkpoint_interval,
            "cpu_checkpointing", s->cpu_checkpointing);
        json_t *evals = json_array();
        for (int64_t i = 0; i < s->n_evals; i++)
            json_array_append_new(evals, json_pack("{s:I, s:o, s:o}", "step",
                                                   (json_int_t)s->evals[i].step, "loss",
                                                   report_real(s->evals[i].loss), "accuracy",
                                                   report_real(s->evals[i].accuracy)));
        if (doc && extra) {
            json_object_set_new(doc, "nvme", report_nvme_json(t));
            const zt_data_memory *dm = zt_trainer_data_memory(t);
            json_object_set_new(doc, "data", dm ? zt_datamem_json(dm) : json_null());
            json_object_set_new(doc, "zero", zero);
            json_object_set_new(doc, "eval", evals);
            json_object_set_new(doc, "pipeline", report_pipe_json(s, all));
            json_object_set_new(doc, "profile",
                                zt_profile_is(s->be) ? zt_profile_json(s->be) : json_null());
            json_object_update(doc, extra);
        } else {
            json_decref(zero);
            json_decref(evals);
        }
        json_decref(extra);
        if (!doc || json_dump_file(doc, path, JSON_INDENT(1) | JSON_REAL_PRECISION(17)) != 0)
            st = zt_fail(ZT_ERR_IO, "check that the report's directory exists and is writable",
                         "cannot write report %s: %s", path, strerror(errno));
        json_decref(doc);
        free(all);
    }
    return zt_world_agree(w, st, NULL);
}
