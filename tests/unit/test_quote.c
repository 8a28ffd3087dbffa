/* engine/quote: bytes from a user's file in a message. Each case's expected
 * text is written out by hand; every output is also checked to be valid
 * UTF-8 without control characters, by a decoder written here (not the one
 * under test), so raw bytes can never reach a terminal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "engine/quote.h"

/* Valid UTF-8 and no C0/C1 control or DEL, the decoder of RFC 3629. */
static int printable_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned b = *p;
        if (b < 0x20 || b == 0x7F)
            return 0;
        if (b < 0x80) {
            p++;
            continue;
        }
        int n = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
        if (!n)
            return 0;
        uint32_t cp = b & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
        for (int k = 1; k < n; k++) {
            if ((p[k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (p[k] & 0x3F);
        }
        if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
            (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF || (cp >= 0x80 && cp <= 0x9F))
            return 0;
        p += n;
    }
    return 1;
}

static void assert_quotes(const char *in, size_t len, const char *want)
{
    char out[ZT_QUOTE_CAP];
    zt_quote(out, sizeof out, in, len);
    if (strcmp(out, want) != 0)
        fail_msg("quoted \"%s\", expected \"%s\"", out, want);
    assert_true(printable_utf8(out));
}

#define Q(lit, want) assert_quotes(lit, sizeof lit - 1, want)

static void test_quote_text(void **state)
{
    (void)state;
    Q("", "");
    Q("hello world", "hello world");
    /* GPT-2's byte alphabet and other printable UTF-8 stay readable. */
    Q("\xC4\xA0t \xE4\xB8\xAD \xF0\x9F\x99\x82", "\xC4\xA0t \xE4\xB8\xAD \xF0\x9F\x99\x82");
    Q("say \"hi\" \\ there", "say \\\"hi\\\" \\\\ there");
    Q("a\tb\nc\rd", "a\\tb\\nc\\rd");
}

static void test_quote_bytes(void **state)
{
    (void)state;
    /* A terminal's escape sequences, DEL and NUL. */
    Q("\x1b[31mred\x1b]0;title\x07", "\\x1B[31mred\\x1B]0;title\\x07");
    Q("a\x7f" "b", "a\\x7Fb");
    assert_quotes("a\0b", 3, "a\\x00b");
    /* A sequence cut short (a file truncated inside a character), at the end
     * and before other text. */
    Q("ok \xC3", "ok \\xC3");
    Q("\xE4\xB8", "\\xE4\\xB8");
    Q("\xF0\x9F\x99 x", "\\xF0\\x9F\\x99 x");
    /* Not UTF-8 at all: stray continuation, Latin-1, overlong, surrogate,
     * beyond U+10FFFF, bytes that never start a sequence. */
    Q("\x80", "\\x80");
    Q("caf\xe9", "caf\\xE9");
    Q("\xC0\xAF", "\\xC0\\xAF");
    Q("\xE0\x80\xAF", "\\xE0\\x80\\xAF");
    Q("\xED\xA0\x80", "\\xED\\xA0\\x80");
    Q("\xF4\x90\x80\x80", "\\xF4\\x90\\x80\\x80");
    Q("\xFE\xFF", "\\xFE\\xFF");
}

static void test_quote_hidden(void **state)
{
    (void)state;
    /* Valid UTF-8 a terminal acts on: C1 controls, bidi overrides and
     * isolates, line separators, the BOM. */
    Q("\xC2\x9B" "31m", "\\u{009B}31m");
    Q("abc\xE2\x80\xAE" "fed", "abc\\u{202E}fed");
    Q("\xE2\x81\xA6x\xE2\x81\xA9", "\\u{2066}x\\u{2069}");
    Q("a\xE2\x80\xA8" "b", "a\\u{2028}b");
    Q("\xEF\xBB\xBFreview", "\\u{FEFF}review");
}

static void test_quote_caps(void **state)
{
    (void)state;
    char in[200], want[200];
    memset(in, 'x', sizeof in);
    memset(want, 'x', ZT_QUOTE_MAX);
    snprintf(want + ZT_QUOTE_MAX, sizeof want - ZT_QUOTE_MAX, "... (200 bytes)");
    assert_quotes(in, sizeof in, want);
    /* The cut never splits a character: the 2-byte one that would cross
     * ZT_QUOTE_MAX is left out whole. */
    memset(in, 'y', sizeof in);
    in[ZT_QUOTE_MAX - 1] = '\xC3';
    in[ZT_QUOTE_MAX] = '\xA9';
    memset(want, 'y', ZT_QUOTE_MAX - 1);
    snprintf(want + ZT_QUOTE_MAX - 1, sizeof want - (ZT_QUOTE_MAX - 1), "... (200 bytes)");
    assert_quotes(in, sizeof in, want);
    /* The worst case fits ZT_QUOTE_CAP: every byte escaped, and the tail. */
    memset(in, 0x01, sizeof in);
    char out[ZT_QUOTE_CAP];
    zt_quote(out, sizeof out, in, sizeof in);
    assert_int_equal(strlen(out), 4 * ZT_QUOTE_MAX + strlen("... (200 bytes)"));
    /* A smaller buffer cuts the quote at a whole escape, NUL-terminated. */
    char small[10];
    zt_quote(small, sizeof small, "\x01\x02\x03", 3);
    assert_string_equal(small, "\\x01\\x02");
}

/* A whole message: its own newlines, tabs, quotes and backslashes stay,
 * what it quoted raw is escaped, and nothing is cut short that fits. */
static void test_quote_message(void **state)
{
    (void)state;
    char out[4 * 300 + 1];
    zt_quote_message(out, sizeof out, "cfg.json: 2 errors:\n  \"a\\b\": unknown key\n\thint");
    assert_string_equal(out, "cfg.json: 2 errors:\n  \"a\\b\": unknown key\n\thint");
    zt_quote_message(out, sizeof out, "key \x1b[2J\xc3 and \xe2\x80\xae: unknown");
    assert_string_equal(out, "key \\x1B[2J\\xC3 and \\u{202E}: unknown");
    char longmsg[300];
    memset(longmsg, 'x', sizeof longmsg - 1);
    longmsg[sizeof longmsg - 1] = '\0';
    zt_quote_message(out, sizeof out, longmsg);
    assert_int_equal(strlen(out), sizeof longmsg - 1);
    /* Every byte at its worst (\xNN) still fits 4 x strlen + 1. */
    char worst[64];
    memset(worst, 0x01, sizeof worst - 1);
    worst[sizeof worst - 1] = '\0';
    char wout[4 * 63 + 1];
    zt_quote_message(wout, sizeof wout, worst);
    assert_int_equal(strlen(wout), 4 * 63);
    for (size_t i = 0; i < strlen(out); i++)
        assert_true(out[i] == 'x');
    zt_quote_message(out, sizeof out, "a\x7f\r\x01");
    assert_string_equal(out, "a\\x7F\\r\\x01");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quote_text),
        cmocka_unit_test(test_quote_bytes),
        cmocka_unit_test(test_quote_hidden),
        cmocka_unit_test(test_quote_caps),
        cmocka_unit_test(test_quote_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
