/*
 * flags_help: the --help printer of every command's flag table and the "did
 * you mean" of an unknown flag (cmd/flags_impl.h).
 */
#include <stdlib.h>
#include <string.h>

#include "cmd/flags_impl.h"
#include "engine/spell.h"
#include "models/registry.h"

const cmd_flag *flags_find(const cmd_flag_table *t, const char *name)
{
    for (int i = 0; i < t->n_flags; i++) {
        const cmd_flag *fl = &t->flags[i];
        if (fl->kind != FLAG_MODEL &&
            (!strcmp(fl->name, name) || (fl->alias && !strcmp(fl->alias, name))))
            return fl;
    }
    return NULL;
}

/* ---- --help. ---- */

#define HELP_COLUMN 34

static void help_line(FILE *out, const char *lead, const char *help)
{
    int n = fprintf(out, "  %s", lead);
    for (const char *line = help; line;) {
        const char *nl = strchr(line, '\n');
        int len = nl ? (int)(nl - line) : (int)strlen(line);
        if (n >= HELP_COLUMN) {
            fputc('\n', out);
            n = 0;
        }
        fprintf(out, "%*s%.*s\n", HELP_COLUMN - n, "", len, line);
        n = 0;
        line = nl ? nl + 1 : NULL;
    }
}

/* The model schema's flags, one line per flag with each model's default. */
static void help_model_args(FILE *out)
{
    int n;
    const zt_model_arg *rows = zt_model_args_schema(&n);
    for (int i = 0; i < n; i++) {
        bool first = true;
        for (int k = 0; k < i && first; k++)
            first = strcmp(rows[k].flag, rows[i].flag) != 0;
        if (!first)
            continue;
        char lead[64], help[256];
        snprintf(lead, sizeof lead, "%s %s", rows[i].flag, rows[i].metavar);
        int len = snprintf(help, sizeof help, "%s", rows[i].help);
        int models = 0;
        for (int k = i; k < n; k++)
            models += !strcmp(rows[k].flag, rows[i].flag);
        const char *sep = " (default ";
        for (int k = i; k < n && len < (int)sizeof help - 40; k++) {
            const zt_model_arg *r = &rows[k];
            if (strcmp(r->flag, rows[i].flag) != 0 || (!r->dflt_from && r->dflt <= 0))
                continue;
            const char *who = models > 1 ? r->model : "";
            if (r->dflt_from)
                len += snprintf(help + len, sizeof help - (size_t)len, "%s%s%sthe %s", sep, who,
                                models > 1 ? " " : "", r->dflt_from);
            else
                len += snprintf(help + len, sizeof help - (size_t)len, "%s%s%s%g", sep, who,
                                models > 1 ? " " : "", r->dflt);
            sep = ", ";
        }
        if (strcmp(sep, ", ") == 0)
            snprintf(help + len, sizeof help - (size_t)len, ")");
        help_line(out, lead, help);
    }
}

void flags_help(const cmd_flag_table *t, FILE *out)
{
    fputs(t->usage, out);
    for (int i = 0; i < t->n_flags; i++) {
        const cmd_flag *fl = &t->flags[i];
        if (fl->section)
            fprintf(out, "\n%s:\n", fl->section);
        if (fl->kind == FLAG_MODEL) {
            help_model_args(out);
            continue;
        }
        char lead[96];
        snprintf(lead, sizeof lead, "%s%s%s%s%s", fl->name, fl->alias ? ", " : "",
                 fl->alias ? fl->alias : "", fl->metavar ? " " : "",
                 fl->metavar ? fl->metavar : "");
        help_line(out, lead, fl->help);
    }
    if (!t->command[0])
        fputs("\n  --help, --version\n", out);
}

/* HF Trainer and DeepSpeed names of flags zerotrain spells its own way. */
static const struct {
    const char *theirs, *ours;
} flag_synonyms[] = {
    {"--per_device_train_batch_size", "--micro-batch-size"},
    {"--train_micro_batch_size_per_gpu", "--micro-batch-size"},
    {"--learning_rate", "--lr"},
    {"--max_steps", "--steps"},
    {"--num_train_epochs", "--epochs"},
    {"--warmup_ratio", "--warmup-steps"},
    {"--output_dir", "--save-dir"},
    {"--save_steps", "--save-interval"},
    {"--save_total_limit", "--keep-last"},
    {"--eval_steps", "--eval-interval"},
    {"--resume_from_checkpoint", "--resume"},
    {"--logging_steps", "--log-interval"},
    {"--deepspeed_config_file", "--config"},
};

/* "; did you mean --x?" for an unknown flag, or "": an HF/DeepSpeed name's
 * counterpart, the same name with '-' for '_', else the closest flag. */
void flags_suggest(const cmd_flag_table *t, bool model_args, const char *name, char *buf,
                          size_t n)
{
    buf[0] = '\0';
    const char *hit = NULL;
    for (size_t i = 0; i < sizeof flag_synonyms / sizeof flag_synonyms[0] && !hit; i++)
        if (!strcmp(name, flag_synonyms[i].theirs) && flags_find(t, flag_synonyms[i].ours))
            hit = flag_synonyms[i].ours;
    char dashed[64];
    snprintf(dashed, sizeof dashed, "%s", name);
    for (char *c = dashed + 2; *c; c++)
        if (*c == '_')
            *c = '-';
    int n_model = 0;
    const zt_model_arg *rows = model_args ? zt_model_args_schema(&n_model) : NULL;
    size_t m = 0, cap = (size_t)(2 * t->n_flags + n_model);
    const char **cands = calloc(cap > 0 ? cap : 1, sizeof *cands);
    if (!cands)
        return;
    for (int i = 0; i < t->n_flags; i++) {
        if (t->flags[i].kind == FLAG_MODEL)
            continue;
        cands[m++] = t->flags[i].name;
        cands[m++] = t->flags[i].alias;
    }
    for (int i = 0; i < n_model; i++)
        cands[m++] = rows[i].flag;
    for (size_t i = 0; i < m && !hit; i++)
        if (cands[i] && !strcmp(cands[i], dashed))
            hit = cands[i];
    if (!hit)
        hit = zt_spell_closest(dashed, cands, m);
    if (hit)
        snprintf(buf, n, "; did you mean %s?", hit);
    free(cands);
}

