/*
 * cmd: the commands main dispatches to, one file each: train.c (the training
 * run), estimate.c (--estimate-memory), checkpoint.c (consolidate, generate,
 * eval), check.c (the preflight). Each parses its flags (cmd/flags.h), runs, and returns the process's
 * exit code (cmd/exit.h).
 *
 * Memory: each command frees what it made before returning. Collective: the
 * commands that start a world (all but consolidate) are run by every rank.
 */
#ifndef ZT_CMD_H
#define ZT_CMD_H

#include <stdio.h>

#include "cmd/flags.h"
#include "data/loader.h"
#include "engine/fingerprint.h"
#include "engine/world/world.h"
#include "models/model.h"

/* zerotrain --config FILE --model NAME ...: parses, trains, reports. */
int cmd_train(int argc, char **argv);

/* --estimate-memory with the parsed flags, in a started world. */
int cmd_estimate(zt_world *w, const cmd_train_flags *f);

/* zerotrain check <the job's flags>: the preflight (cmd/check.c). */
int cmd_check(int argc, char **argv);

/* Every rank runs what rank 0 runs (engine/world/world.h): the build, the
 * resolved config, the model, the run's length and seed, the data and
 * tokenizer files, and every flag that decides which collectives run.
 * Collective. */
zt_status cmd_same_run(const zt_world *w, const cmd_train_flags *f, const zt_config *cfg);
/* Hashes the --data file and the tokenizer's two files into fp (every rank
 * must read the same bytes). */
zt_status cmd_fingerprint_inputs(zt_fingerprint *fp, const cmd_train_flags *f);

/* zerotrain consolidate DIR ...: one process, no MPI. */
int cmd_consolidate(int argc, char **argv);

/* zerotrain generate|eval --checkpoint DIR ...: a world of any size. */
int cmd_from_checkpoint(int argc, char **argv);

/* The data a model reads (nothing for the mlp, whose synthetic data follows
 * its built model) with the model's vocabulary set from the tokenizer (the
 * flags' model arguments must be resolved). */
zt_status cmd_data_load(zt_data *d, cmd_train_flags *f, const zt_data_budget *budget);

/* What each rank may hold while loading data (engine/hostmem.h's share of
 * the limits, every rank of the node loading its own copy). Collective over
 * the node: every rank calls it, whatever its flags. */
void cmd_data_budget(const zt_world *w, zt_data_budget *b);

/* A config's notes for the summary, "  note: ..." or "  warning: ...". */
void cmd_print_notes(const zt_config *cfg);

#endif
