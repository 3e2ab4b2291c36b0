/* A tile configuration built field by field on the stack, as ggml's AMX kernels build
   theirs, then a tile load and store: prints the bytes read back from the tile's last row
   (a tile configured with 0 rows faults instead). Built at -O2 by tests/test_amx_build.py. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <immintrin.h>

typedef struct {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved_0[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config_t;

__attribute__((noinline)) static void configure(void) {
    _Alignas(64) tile_config_t tc = {0};
    tc.palette_id = 1;
    tc.rows[0] = 16;
    tc.colsb[0] = 64;
    _tile_loadconfig(&tc);
}

int main(void) {
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */)) {
        printf("no grant\n");
        return 3;
    }
    static int8_t in[16 * 64], out[16 * 64];
    for (int i = 0; i < 16 * 64; i++) in[i] = (int8_t)(i % 127);
    configure();
    _tile_loadd(0, in, 64);
    _tile_stored(0, out, 64);
    _tile_release();
    printf("%d %d\n", out[15 * 64], out[16 * 64 - 1]);
    return 0;
}
