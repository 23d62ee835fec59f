#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
int main(void) {
  const float c = 1.0f / 127.0f;  /* RN(1/127) */
  uint64_t bad = 0, n = 0;
  for (uint64_t b = 0; b < 0x7f800000ull; ++b) {  /* every non-negative finite float */
    uint32_t u = (uint32_t)b; float x; memcpy(&x, &u, 4);
    float q = x * c;
    float r = fmaf(-q, 127.0f, x);
    float s = fmaf(r, c, q);
    volatile float ref = x / 127.0f;
    if (s != ref) { if (bad < 5) printf("x=%a s=%a ref=%a\n", x, s, ref); ++bad; }
    ++n;
  }
  printf("checked %llu, mismatches %llu\n", (unsigned long long)n, (unsigned long long)bad);
  return 0;
}
