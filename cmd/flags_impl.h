/*
 * flags_impl: what cmd/flags.c (the tables and the parser) and
 * cmd/flags_help.c (--help and "did you mean") share: the shape of a flag
 * table. Private to cmd/.
 *
 * Memory: the tables are static. Collective: none.
 */
#ifndef ZT_CMD_FLAGS_IMPL_H
#define ZT_CMD_FLAGS_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    FLAG_STRING,   /* const char * */
    FLAG_INT,      /* int64_t in [min, max] */
    FLAG_CHOICE,   /* const char *, one of `choices` ("a|b|c") */
    FLAG_SWITCH,   /* bool, no value */
    FLAG_OPTIONAL, /* bool at offset, const char * at offset2: a value only when one follows */
    FLAG_CUSTOM,   /* parse() */
    FLAG_MODEL     /* not a flag: the model-argument schema's flags go here */
} flag_kind;

/* Which models a flag shapes, by the kind of data they read. */
typedef enum {
    FOR_ALL = 0,
    FOR_SYNTHETIC, /* the mlp */
    FOR_FILES,     /* models that read --data */
    FOR_TEXT       /* language models */
} flag_models;

typedef struct {
    const char *name, *alias;
    const char *metavar; /* the value in --help; NULL for a switch */
    const char *help;    /* lines after the first are indented under it */
    flag_kind kind;
    size_t offset, offset2;
    int64_t min, max;
    const char *choices;
    /* FLAG_CUSTOM: stores val; 0, or a usage error's exit code (printed). */
    int (*parse)(const char *name, const char *val, void *dst);
    flag_models models;
    const char *section; /* a heading printed before this flag in --help */
} cmd_flag;

typedef struct {
    const char *command;  /* "" for the training command, else the subcommand */
    const char *usage;    /* usage lines and a paragraph */
    const cmd_flag *flags;
    int n_flags;
    bool positional;      /* one positional argument (consolidate's DIR) */
} cmd_flag_table;

/* The flag named `name` (or its alias) in t, or NULL. */
const cmd_flag *flags_find(const cmd_flag_table *t, const char *name);

/* t's --help: its usage paragraph, then each flag (model flags from the
 * registry's schema) under its section heading. */
void flags_help(const cmd_flag_table *t, FILE *out);

/* "; did you mean --x?" for an unknown flag `name` of table t (model_args:
 * the model schema's flags count too), or "" when nothing is close. */
void flags_suggest(const cmd_flag_table *t, bool model_args, const char *name, char *buf,
                   size_t n);

#endif
