/* What the observability modules write, byte for byte: TensorBoard's CRC32C
 * (RFC 3720 test vectors), TensorFlow's CRC mask, an Event record of one
 * scalar (protobuf wire format, written out by hand below), an event file
 * read back record by record; DeepSpeed's size and number formats. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/monitor/comms_log.h"
#include "engine/monitor/flops.h"
#include "engine/monitor/tensorboard.h"

static void test_crc32c(void **state)
{
    (void)state;
    assert_int_equal(zt_tb_crc32c("123456789", 9), 0xE3069283u);
    uint8_t buf[32];
    memset(buf, 0, sizeof buf);
    assert_int_equal(zt_tb_crc32c(buf, 32), 0x8A9136AAu);
    memset(buf, 0xFF, sizeof buf);
    assert_int_equal(zt_tb_crc32c(buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    assert_int_equal(zt_tb_crc32c(buf, 32), 0x46DD794Eu);
    /* ((c >> 15 | c << 17) + 0xA282EAD8) mod 2^32 of the check value */
    assert_int_equal(zt_tb_mask_crc(0xE3069283u), 0xC78AB0E5u);
}

static void test_scalar_event(void **state)
{
    (void)state;
    uint8_t buf[128];
    size_t n = zt_tb_encode_scalar(buf, sizeof buf, 1.5, 300, "a/b", 0.25f);
    static const uint8_t want[] = {
        0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF8, 0x3F, /* wall_time 1.5 (fixed64) */
        0x10, 0xAC, 0x02,                                     /* step 300 (varint) */
        0x2A, 0x0C,                                           /* summary, 12 bytes */
        0x0A, 0x0A,                                           /*   value, 10 bytes */
        0x0A, 0x03, 'a', '/', 'b',                            /*     tag "a/b" */
        0x15, 0x00, 0x00, 0x80, 0x3E,                         /*     simple_value 0.25f */
    };
    assert_int_equal(n, sizeof want);
    assert_memory_equal(buf, want, sizeof want);
    /* step 0 is proto3's default: omitted */
    n = zt_tb_encode_scalar(buf, sizeof buf, 1.5, 0, "a/b", 0.25f);
    assert_int_equal(n, sizeof want - 3);
    assert_int_equal(buf[9], 0x2A);
    /* too small a buffer writes nothing */
    assert_int_equal(zt_tb_encode_scalar(buf, 8, 1.5, 1, "a/b", 0.25f), 0);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void test_event_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/zt-tb-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char sub[64];
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    zt_tb_writer w;
    assert_int_equal(zt_tb_open(&w, sub), ZT_OK);
    assert_non_null(strstr(w.path, "/a/b/events.out.tfevents."));
    zt_tb_scalar(&w, "Train/Samples/lr", 0.5, 64);
    zt_tb_close(&w);
    FILE *f = fopen(w.path, "rb");
    assert_non_null(f);
    uint8_t blob[512];
    size_t len = fread(blob, 1, sizeof blob, f);
    fclose(f);
    /* two records, each framed and checksummed */
    size_t pos = 0;
    int records = 0;
    while (pos < len) {
        uint64_t n = 0;
        for (int i = 0; i < 8; i++)
            n |= (uint64_t)blob[pos + i] << (8 * i);
        assert_int_equal(le32(blob + pos + 8), zt_tb_mask_crc(zt_tb_crc32c(blob + pos, 8)));
        assert_true(pos + 12 + n + 4 <= len);
        assert_int_equal(le32(blob + pos + 12 + n),
                         zt_tb_mask_crc(zt_tb_crc32c(blob + pos + 12, (size_t)n)));
        if (records == 0) /* file_version, after wall_time (9 bytes) */
            assert_memory_equal(blob + pos + 12 + 9, "\x1a\x0d" "brain.Event:2", 15);
        pos += 12 + n + 4;
        records++;
    }
    assert_int_equal(pos, len);
    assert_int_equal(records, 2);
    unlink(w.path);
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    rmdir(sub);
    snprintf(sub, sizeof sub, "%s/a", dir);
    rmdir(sub);
    rmdir(dir);
    /* a directory that cannot be made is an error that names it */
    assert_int_equal(zt_tb_open(&w, "/proc/no/such/dir"), ZT_ERR_IO);
    assert_non_null(strstr(zt_status_message(), "cannot create tensorboard directory"));
}

static void test_deepspeed_formats(void **state)
{
    (void)state;
    /* deepspeed.utils.comms_logging.convert_size: round(x / 1024^i, 2) printed by Python */
    char b[48];
    zt_comms_log_size(0, b, sizeof b);
    assert_string_equal(b, "0B");
    zt_comms_log_size(512, b, sizeof b);
    assert_string_equal(b, "512.0 B");
    zt_comms_log_size(1024, b, sizeof b);
    assert_string_equal(b, "1.0 KB");
    zt_comms_log_size(442240, b, sizeof b); /* 431.875 KB */
    assert_string_equal(b, "431.88 KB");
    zt_comms_log_size(1.5 * 1024 * 1024, b, sizeof b);
    assert_string_equal(b, "1.5 MB");
    zt_comms_log_size(3.0 * 1024 * 1024 * 1024, b, sizeof b);
    assert_string_equal(b, "3.0 GB");
    assert_string_equal(zt_comms_log_op_name(ZT_COMM_REDUCE_SCATTER), "reduce_scatter_tensor");
    assert_string_equal(zt_comms_log_op_name(ZT_COMM_ALL_GATHER), "all_gather_into_tensor");
    /* the flops profiler's: 2 decimals, a power-of-1000 prefix; params say B for G */
    zt_flops_number(110529, "", true, b, sizeof b);
    assert_string_equal(b, "110.53 K");
    zt_flops_number(1.5e9, "", true, b, sizeof b);
    assert_string_equal(b, "1.50 B");
    zt_flops_number(7.08e6, "MACs", false, b, sizeof b);
    assert_string_equal(b, "7.08 MMACs");
    zt_flops_number(3.2e13, "FLOPS", false, b, sizeof b);
    assert_string_equal(b, "32.00 TFLOPS");
    zt_flops_number(0, "MACs", false, b, sizeof b);
    assert_string_equal(b, "0.00 MACs");
    zt_flops_duration(0.51814, b, sizeof b);
    assert_string_equal(b, "518.14 us");
    zt_flops_duration(12.5, b, sizeof b);
    assert_string_equal(b, "12.50 ms");
    zt_flops_duration(2500, b, sizeof b);
    assert_string_equal(b, "2.50 s");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test(test_scalar_event),
        cmocka_unit_test(test_event_file),
        cmocka_unit_test(test_deepspeed_formats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
