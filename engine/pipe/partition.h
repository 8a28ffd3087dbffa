/*
 * partition: which contiguous units of a model each pipeline stage runs, by
 * DeepSpeed's PipelineModule partition_method (DS runtime/pipe/module.py,
 * runtime/utils.py, version 0.19.6). The method text is lower-cased first, as
 * DeepSpeed does:
 *
 *   "uniform"      balances unit counts: each stage gets n / P units and the
 *                  first n mod P stages one more (partition_uniform).
 *   "parameters"   balances each unit's parameter count (partition_balanced,
 *                  below). DeepSpeed's default.
 *   "type:REGEX"   balances a weight of 1 for each unit whose type (the class
 *                  name a PyTorch model would give it: zt_unit_ops.type)
 *                  REGEX matches anywhere, case-insensitively, 0 for the
 *                  others. DeepSpeed takes the text between the first and the
 *                  second ':' as REGEX (so a ':' inside it cuts it off) after
 *                  lower-casing the whole method (so `\S` becomes `\s`); both
 *                  are kept. REGEX is a POSIX extended regular expression here
 *                  (Python's `re` in DeepSpeed: the common syntax agrees).
 *
 * partition_balanced is DeepSpeed's dynamic program for the linear partition
 * problem: over every split of the units into P non-empty contiguous parts
 * it minimises (heaviest part - lightest part), and on ties keeps the later
 * split point. With n <= P units it falls back to "uniform".
 *
 * Errors (ZT_ERR_USAGE) use DeepSpeed's messages: "Partitioning method M not
 * implemented.", "Partitioning 'REGEX' found no valid layers to partition.";
 * and zerotrain refuses a partition that leaves a stage without units (fewer
 * units than stages), which DeepSpeed builds as an empty stage.
 *
 * Memory: the caller's bounds array (stages + 1 entries). Collective: none.
 */
#ifndef ZT_PIPE_PARTITION_H
#define ZT_PIPE_PARTITION_H

#include <stdint.h>

#include "engine/status.h"
#include "models/model.h"

/* bounds[s] = the first unit of stage s, bounds[stages] = m->n_units, from
 * the method text (DeepSpeed's spelling; NULL: "parameters"). */
zt_status zt_pipe_partition(const zt_model *m, int stages, const char *method, int *bounds);

/* DeepSpeed's helpers, exposed for tests: parts (num_parts + 1 entries). */
void zt_pipe_partition_uniform(int num_items, int num_parts, int *parts);
zt_status zt_pipe_partition_balanced(const double *weights, int num_items, int num_parts,
                                     int *parts);

#endif
