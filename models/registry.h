/*
 * registry: the built-in models by name, and the one schema of their
 * arguments. Everything that needs to know which models exist (the flag
 * table and --help, data loading, --estimate-memory, checkpoints) asks here,
 * so adding a model is one registry entry, its builder and its schema rows.
 *
 * Model entry: the --model name, what its --data holds (zt_data_kind), the
 * vocabulary --estimate-memory plans with when no data is given, where the
 * project's copy of its data lives (the hint of "needs --data"), and its
 * builder.
 *
 * Argument schema: one row per (argument, model) pair: the zt_model_args field
 * (its name is also the checkpoint manifest's key), the flag that sets it,
 * the models it shapes, its kind and range, and its default for that model.
 * A model's arguments are the rows naming it, in table order; a flag shapes
 * only the models of its rows (another model given it is a usage error).
 * Defaults: an int field is unset when <= 0, a real one when < 0; an unset
 * field takes the row's number, or the value of the field `dflt_from` names
 * (the mlp's in/out sizes follow its width). vocab_size has neither: the
 * caller fills it from the data's tokenizer.
 *
 * Memory: static tables; nothing to free. Collective: none.
 */
#ifndef ZT_REGISTRY_H
#define ZT_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/dataset.h"
#include "engine/status.h"
#include "models/model.h"

typedef struct {
    const char *name;        /* --model NAME */
    const char *summary;     /* one line for --help */
    zt_data_kind data;
    int64_t estimate_vocab;  /* --estimate-memory's vocabulary without --data (0: none) */
    const char *data_hint;   /* where the project's copy of the data is */
    const char *seq_key;     /* the argument giving tokens per sample (NULL: no tokens) */
    zt_status (*build)(const zt_model_args *a, zt_model *m); /* args resolved */
} zt_model_entry;

/* The registry, in --help order. */
const zt_model_entry *zt_model_registry(int *n);
/* The entry named `name`, or NULL. */
const zt_model_entry *zt_model_find(const char *name);
/* "mlp, gptlite, classifier" (static). */
const char *zt_model_names(void);
/* Tokens per sample the model's data is cut to (its seq_key argument), 0 when
 * the model reads no tokens; a->name must be registered. */
int64_t zt_model_args_seq_len(const zt_model_args *a);

typedef enum {
    ZT_MODEL_ARG_INT = 0, /* int64_t field */
    ZT_MODEL_ARG_REAL,    /* double field, in [min, max) */
    ZT_MODEL_ARG_CHOICE   /* bool field: choices[0] false, choices[1] true */
} zt_model_arg_kind;

typedef struct {
    const char *key;     /* zt_model_args field and manifest key */
    const char *flag;    /* the flag that sets it for this model */
    const char *model;   /* the model this row shapes */
    zt_model_arg_kind kind;
    size_t offset;       /* of the field in zt_model_args */
    double min, max;     /* accepted values (INT: [min, max]; REAL: [min, max)) */
    double dflt;         /* this model's default (unset: none) */
    const char *dflt_from; /* or: the key whose value is the default, NULL */
    const char *choices[2];
    const char *metavar; /* the value's name in --help */
    const char *help;    /* one line for --help */
} zt_model_arg;

/* The schema, all rows. */
const zt_model_arg *zt_model_args_schema(int *n);
/* The row of `flag` for `model`, or NULL when the flag does not shape it. */
const zt_model_arg *zt_model_arg_for(const char *flag, const char *model);
/* Whether any row has this flag (a model flag at all). */
bool zt_model_arg_is_flag(const char *flag);
/* The models that take `flag`, space separated ("gptlite classifier"), into
 * buf. */
void zt_model_arg_models(const char *flag, char *buf, size_t n);

/* Reads a flag's text value into the row's field; false when it is not a
 * value the row accepts. */
bool zt_model_arg_parse(const zt_model_arg *r, const char *text, zt_model_args *a);
/* The row's field as a number (CHOICE: 0 or 1), and its text for a CHOICE. */
double zt_model_arg_value(const zt_model_arg *r, const zt_model_args *a);
const char *zt_model_arg_choice(const zt_model_arg *r, const zt_model_args *a);
/* Sets the field from a number (CHOICE: nonzero is choices[1]). */
void zt_model_arg_set(const zt_model_arg *r, zt_model_args *a, double v);

/* zt_model_args_init and zt_model_args_resolve (models/model.h) are
 * implemented here: the defaults are the schema's. */

#endif
