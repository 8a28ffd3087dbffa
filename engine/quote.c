/*
 * quote: bytes from a user's file, safe to print (engine/quote.h).
 */
#include "engine/quote.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The length of the valid UTF-8 sequence at s[0, len) and its code point; 0
 * when it is not one (a stray continuation, an overlong or truncated
 * sequence, a surrogate, beyond U+10FFFF). */
static size_t quote_utf8(const unsigned char *s, size_t len, uint32_t *cp)
{
    unsigned b = s[0];
    size_t n = b >= 0xC2 && b < 0xE0   ? 2
               : b >= 0xE0 && b < 0xF0 ? 3
               : b >= 0xF0 && b < 0xF5 ? 4
                                       : 0;
    if (n == 0 || n > len)
        return 0;
    uint32_t c = b & (0x7Fu >> n);
    for (size_t k = 1; k < n; k++) {
        if ((s[k] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (s[k] & 0x3Fu);
    }
    if ((n == 3 && c < 0x800) || (n == 4 && c < 0x10000) || (c >= 0xD800 && c <= 0xDFFF) ||
        c > 0x10FFFF)
        return 0;
    *cp = c;
    return n;
}

/* Characters a terminal acts on or reorders rather than shows. */
static int quote_hidden(uint32_t c)
{
    return (c >= 0x80 && c <= 0x9F) || c == 0x2028 || c == 0x2029 || (c >= 0x202A && c <= 0x202E) ||
           (c >= 0x2066 && c <= 0x2069) || c == 0x200E || c == 0x200F || c == 0x061C ||
           c == 0xFEFF;
}

/* zt_quote's rules over at most max_in bytes; a message (zt_quote_message)
 * keeps its newlines, tabs, backslashes and quotes, which are its own. */
static char *quote_core(char *out, size_t cap, const void *s, size_t len, size_t max_in,
                        int message)
{
    const unsigned char *p = s;
    size_t k = 0, i = 0;
    if (cap == 0)
        return out;
    out[0] = '\0';
    /* Room for what one input character becomes, and the NUL. */
#define QUOTE_PUT(...)                                                                             \
    do {                                                                                           \
        int w_ = snprintf(out + k, cap - k, __VA_ARGS__);                                          \
        if (w_ < 0 || (size_t)w_ >= cap - k) {                                                     \
            out[k] = '\0';                                                                         \
            return out;                                                                            \
        }                                                                                          \
        k += (size_t)w_;                                                                           \
    } while (0)
    while (i < len) {
        unsigned b = p[i];
        uint32_t cp = 0;
        size_t n = b < 0x80 ? 1 : quote_utf8(p + i, len - i, &cp);
        if (i + (n ? n : 1) > max_in)
            break;
        if (message && (b == '\n' || b == '\t' || b == '\\' || b == '"'))
            QUOTE_PUT("%c", (char)b);
        else if (b == '\\' || b == '"')
            QUOTE_PUT("\\%c", (char)b);
        else if (b == '\n')
            QUOTE_PUT("\\n");
        else if (b == '\r')
            QUOTE_PUT("\\r");
        else if (b == '\t')
            QUOTE_PUT("\\t");
        else if (b < 0x20 || b == 0x7F || (b >= 0x80 && n == 0))
            QUOTE_PUT("\\x%02X", b);
        else if (b >= 0x80 && quote_hidden(cp))
            QUOTE_PUT("\\u{%04X}", (unsigned)cp);
        else
            QUOTE_PUT("%.*s", (int)n, (const char *)p + i);
        i += n ? n : 1;
    }
    if (i < len)
        QUOTE_PUT("... (%zu bytes)", len);
#undef QUOTE_PUT
    return out;
}

char *zt_quote(char *out, size_t cap, const void *s, size_t len)
{
    return quote_core(out, cap, s, len, ZT_QUOTE_MAX, 0);
}

char *zt_quote_message(char *out, size_t cap, const char *msg)
{
    return quote_core(out, cap, msg, strlen(msg), (size_t)-1, 1);
}
