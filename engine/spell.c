/*
 * spell: edit distance and the closest candidate (engine/spell.h).
 */
#include "engine/spell.h"

#include <ctype.h>
#include <string.h>

#define SPELL_MAX 64 /* words this long or longer get no suggestion */

/* Levenshtein distance of the lowercased a (la) and b, or max + 1 as soon as
 * every entry of a row exceeds max: the distance can only grow from there. */
static size_t spell_bounded(const char *a, size_t la, const char *b, size_t max)
{
    size_t lb = strlen(b);
    size_t row[SPELL_MAX];
    if (la >= SPELL_MAX || lb >= SPELL_MAX)
        return (size_t)-1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0], low = i;
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = a[i - 1] != tolower((unsigned char)b[j - 1]);
            size_t best = diag + cost;
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
            if (best < low)
                low = best;
        }
        if (low > max)
            return max + 1;
    }
    return row[lb];
}

/* word lowercased into buf (SPELL_MAX); its length, or SPELL_MAX if too long. */
static size_t spell_lower(const char *word, char *buf)
{
    size_t n = strlen(word);
    if (n >= SPELL_MAX)
        return SPELL_MAX;
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)tolower((unsigned char)word[i]);
    return n;
}

size_t zt_spell_distance(const char *a, const char *b)
{
    char low[SPELL_MAX];
    size_t la = spell_lower(a, low);
    if (la >= SPELL_MAX)
        return (size_t)-1;
    return spell_bounded(low, la, b, (size_t)-2);
}

const char *zt_spell_closest(const char *word, const char *const *cands, size_t n)
{
    char low[SPELL_MAX];
    size_t la = spell_lower(word, low);
    size_t limit = la / 3 > 2 ? la / 3 : 2;
    if (la >= SPELL_MAX)
        return NULL;
    const char *best = NULL;
    size_t best_d = limit + 1;
    for (size_t i = 0; i < n && best_d > 0; i++) {
        if (!cands[i])
            continue;
        /* Only a distance below best_d changes the answer, and the lengths'
         * difference is a lower bound of it. */
        size_t lb = strlen(cands[i]);
        if ((lb > la ? lb - la : la - lb) >= best_d)
            continue;
        size_t d = spell_bounded(low, la, cands[i], best_d - 1);
        if (d < best_d) {
            best_d = d;
            best = cands[i];
        }
    }
    return best;
}
