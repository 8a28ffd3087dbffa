/*
 * spell: "did you mean" for names the user typed (config keys, flags, option
 * values). The closest candidate by case-insensitive edit distance, within
 * max(2, length / 3) edits, so a typo finds its word and an unrelated name
 * finds nothing.
 *
 * Memory: none (the result points into the candidates). Collective: none.
 */
#ifndef ZT_SPELL_H
#define ZT_SPELL_H

#include <stddef.h>

/* Levenshtein distance, case-insensitive; (size_t)-1 for words of 64
 * characters or more (no typo suggestion is worth that). */
size_t zt_spell_distance(const char *a, const char *b);

/* The candidate closest to `word`, or NULL when none is within
 * max(2, strlen(word) / 3) edits. Ties go to the earlier candidate; NULL
 * candidates are skipped. */
const char *zt_spell_closest(const char *word, const char *const *cands, size_t n);

#endif
