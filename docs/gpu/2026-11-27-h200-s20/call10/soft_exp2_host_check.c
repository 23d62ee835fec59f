#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
static float soft_exp2(float x) {
  x = fmaxf(x, -126.0f);
  const float t = x + 12582912.0f;           /* round to nearest integer in the low bits */
  const float j = t - 12582912.0f;
  const float f = x - j;                     /* [-0.5, 0.5] */
  float p = 1.535336188319500e-4f;
  p = fmaf(p, f, 1.339887440266574e-3f);
  p = fmaf(p, f, 9.618437357674640e-3f);
  p = fmaf(p, f, 5.550332471162809e-2f);
  p = fmaf(p, f, 2.402264791363012e-1f);
  p = fmaf(p, f, 6.931472028550421e-1f);
  p = fmaf(p, f, 1.0f);
  uint32_t pb, tb; memcpy(&pb, &p, 4); memcpy(&tb, &t, 4);
  uint32_t r = pb + (tb << 23);
  float out; memcpy(&out, &r, 4); return out;
}
int main(void) {
  double maxe = 0; float worst = 0;
  for (double x = -125.9; x <= 0.02; x += 1.3e-5) {
    float xf = (float)x;
    double ref = exp2((double)xf);
    double e = fabs((double)soft_exp2(xf) - ref) / ref;
    if (e > maxe) { maxe = e; worst = xf; }
  }
  printf("max rel err %.3e at %a\n", maxe, worst);
  printf("2^-130 -> %a, 2^0 -> %a, 2^0.01 -> %a\n", soft_exp2(-130.f), soft_exp2(0.f), soft_exp2(0.01f));
  return 0;
}
