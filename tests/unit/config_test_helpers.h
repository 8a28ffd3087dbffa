/*
 * config_test_helpers: what the config unit tests (tests/unit/test_config*.c)
 * share: the config under test, parse shorthands and assertions on the status
 * message and the notes. Header-only: each test program has its own `cfg`.
 */
#ifndef ZT_CONFIG_TEST_HELPERS_H
#define ZT_CONFIG_TEST_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <string.h>

#include "engine/config/config.h"

/* zt_config is large: keep it out of cmocka's test stacks. */
static zt_config cfg;

static inline zt_status parse_full(const char *json, int ws, const zt_config_overrides *ov)
{
    zt_status_clear();
    return zt_config_parse_string(json, "t.json", ov, ws, &cfg);
}

static inline zt_status parse_ws(const char *json, int ws)
{
    return parse_full(json, ws, NULL);
}
static inline zt_status parse(const char *json)
{
    return parse_full(json, 1, NULL);
}

static inline void check_contains(const char *hay, const char *needle, const char *file, int line)
{
    if (!strstr(hay, needle)) {
        print_error("%s:%d: expected \"%s\" in \"%s\"\n", file, line, needle, hay);
        fail();
    }
}
#define assert_contains(hay, needle) check_contains((hay), (needle), __FILE__, __LINE__)
#define assert_msg(needle) assert_contains(zt_status_message(), (needle))

static inline bool has_note(const char *needle)
{
    for (int i = 0; i < cfg.n_notes; i++)
        if (strstr(cfg.notes[i], needle))
            return true;
    return false;
}

static inline void check_note(const char *needle, const char *file, int line)
{
    if (!has_note(needle)) {
        print_error("%s:%d: no note contains \"%s\"; notes:\n", file, line, needle);
        for (int i = 0; i < cfg.n_notes; i++)
            print_error("  %s\n", cfg.notes[i]);
        fail();
    }
}
#define assert_note(needle) check_note((needle), __FILE__, __LINE__)

static inline void check_fails(const char *json, int ws, zt_status st, const char *needle,
                               const char *file, int line)
{
    zt_status got = parse_ws(json, ws);
    if (got != st) {
        print_error("%s:%d: status %s, expected %s (message: %s)\n", file, line,
                    zt_status_name(got), zt_status_name(st), zt_status_message());
        fail();
    }
    check_contains(zt_status_message(), needle, file, line);
}
#define assert_fails(json, st, needle) check_fails((json), 1, (st), (needle), __FILE__, __LINE__)
#define assert_fails_ws(json, ws, st, needle)                                                      \
    check_fails((json), (ws), (st), (needle), __FILE__, __LINE__)

#define MB1 "\"train_micro_batch_size_per_gpu\": 1"

/* `json` parses, then zt_config_check_supported refuses it with `needle`. */
static inline void assert_refused(const char *json, const char *needle)
{
    assert_int_equal(parse(json), ZT_OK);
    zt_status_clear();
    assert_int_equal(zt_config_check_supported(&cfg), ZT_ERR_UNSUPPORTED);
    assert_msg(needle);
}

#endif
