/* Force-included (-include) into llama.cpp's build so that its AMX kernels can be built in.
 *
 * GCC's _tile_loadconfig (amxtileintrin.h up to at least GCC 12) tells the compiler that
 * `ldtilecfg` reads 8 bytes of the 64-byte tile configuration, so the stores of the tiles'
 * rows and column bytes can be dropped as dead: ggml's configuration then loads with every
 * tile 0 rows long and its first tile load faults (SIGILL). This is the crash that had
 * AMX compiled out of solm's set-up. The macro below issues the same instruction saying it
 * reads all 64 bytes. clang's builtin is correct and is left alone. */
#if defined(__AMX_TILE__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#undef _tile_loadconfig
#define _tile_loadconfig(config) \
    __asm__ volatile ("ldtilecfg\t%X0" :: "m" (*(const unsigned char (*)[64])(config)))
#endif
