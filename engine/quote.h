/*
 * quote: bytes from a user's file, made safe to print in a message. A file
 * cut short, or not text at all, must not put raw bytes on the terminal:
 * invalid UTF-8 reads as mojibake or leaves the terminal in a broken state,
 * control characters (ESC) can move the cursor or retitle the window, and
 * bidirectional overrides can make a line read in another order than it is.
 *
 * zt_quote copies printable ASCII and valid UTF-8 of printable characters as
 * they are ("Ġt" stays readable), writes \\ and \" for a backslash and a
 * quote (so the caller's quotes stay unambiguous), \n \r \t for those, \xNN
 * for every other control byte and every byte that is not part of a valid
 * UTF-8 sequence, and \u{XXXX} for the C1 controls, the line and paragraph
 * separators and the bidirectional controls. At most ZT_QUOTE_MAX bytes of
 * the input are quoted (cut at a character boundary); a longer input ends in
 * "..." followed by its length, e.g. `abc... (2048 bytes)`.
 *
 * Memory: the caller's buffer (ZT_QUOTE_CAP bytes is always enough).
 * Collective: none.
 */
#ifndef ZT_QUOTE_H
#define ZT_QUOTE_H

#include <stddef.h>

#define ZT_QUOTE_MAX 60
/* Every input byte takes at most 4 output bytes (\xNN; \u{XXXX} stands for
 * 2 or 3 input bytes), plus "... (N bytes)" and the NUL. */
#define ZT_QUOTE_CAP (4 * ZT_QUOTE_MAX + 40)

/* Writes the quoted form of s[0, len) into out (cap bytes, ZT_QUOTE_CAP for
 * all of it; less is cut short, still NUL-terminated) and returns out. */
char *zt_quote(char *out, size_t cap, const void *s, size_t len);

/* A whole message made safe for the terminal, whatever its parts quoted
 * from files, flags, keys or names without zt_quote: the same rules, but
 * newlines, tabs, backslashes and quotes stay (they are the message's own)
 * and nothing is cut but what does not fit cap (4 x strlen(msg) + 1 is
 * always enough). cmd/ prints every error through it. */
char *zt_quote_message(char *out, size_t cap, const char *msg);

#endif
