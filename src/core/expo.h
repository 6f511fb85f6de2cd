/* expo.h - the two functions of the exponential distribution that heap
 * profiling's draws need: -log(y) for an exponential draw from a uniform
 * one, and 1 - exp(-x) for the probability that a block is sampled.
 *
 * shoal links no libm for them: libm.so loaded into a process costs it
 * about 300 KB of resident memory whether it is used or not, more than a
 * small program's whole heap.  Both are exact to about 1e-15 relative
 * (series on a reduced argument), far inside what the estimates need.
 */
#ifndef SHOAL_EXPO_H
#define SHOAL_EXPO_H

#include <stdint.h>
#include <string.h>

#define SHOAL_LN2 0.693147180559945309417232121458176568

/* A series' terms go on until they fall below this, relative to the
 * sum: 2^-56, below the last bit of a double. */
#define SHOAL_EXPO_EPS 0x1.0p-56

/* -log(y) for 0 < y <= 1.  y = m * 2^e with m in [sqrt(1/2), sqrt(2)),
 * and log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172: the odd
 * series to s^23 leaves an error below 1e-17.  It is summed in Horner's
 * form, from its last term (a multiply and an add a term, no loop). */
static inline double shoal_neg_log(double y)
{
    uint64_t bits;
    memcpy(&bits, &y, sizeof bits);
    int e = (int)((bits >> 52) & 0x7ff) - 1023;
    bits = (bits & ~((uint64_t)0x7ff << 52)) | ((uint64_t)1023 << 52);   /* m in [1, 2) */
    double m;
    memcpy(&m, &bits, sizeof m);
    if (m > 1.41421356237309504880) {
        m *= 0.5;
        e++;
    }
    double s = (m - 1.0) / (m + 1.0), s2 = s * s;
    double sum = 1.0 / 23;
    sum = 1.0 / 21 + s2 * sum;
    sum = 1.0 / 19 + s2 * sum;
    sum = 1.0 / 17 + s2 * sum;
    sum = 1.0 / 15 + s2 * sum;
    sum = 1.0 / 13 + s2 * sum;
    sum = 1.0 / 11 + s2 * sum;
    sum = 1.0 / 9 + s2 * sum;
    sum = 1.0 / 7 + s2 * sum;
    sum = 1.0 / 5 + s2 * sum;
    sum = 1.0 / 3 + s2 * sum;
    sum = 1.0 + s2 * sum;
    return -(2.0 * s * sum + e * SHOAL_LN2);
}

/* 1 - exp(-x) for x >= 0: the series x - x^2/2 + x^3/6 - ... below 1/2
 * (no cancellation for small x; for a block of s bytes at a rate r,
 * x = s / r, mostly below 1/100, and then six terms reach the last
 * bit), else 1 - 2^-k exp(-r) with x = k ln 2 + r, 0 <= r < ln 2. */
static inline double shoal_one_minus_exp_neg(double x)
{
    if (x < 0.5) {
        double term = x, sum = 0.0;
        for (int k = 1; k <= 18 && __builtin_fabs(term) >= sum * SHOAL_EXPO_EPS; k++) {
            sum += term;
            term *= -x / (k + 1);
        }
        return sum;
    }
    if (x > 745.0)
        return 1.0;
    int k = (int)(x / SHOAL_LN2);
    double r = x - k * SHOAL_LN2, term = 1.0, e = 0.0;
    for (int i = 1; i <= 20; i++) {
        e += term;
        term *= -r / i;
    }
    uint64_t scale = (uint64_t)(1023 - k) << 52;   /* 2^-k, k <= 1074 */
    double p;
    memcpy(&p, &scale, sizeof p);
    return 1.0 - (k < 1023 ? e * p : 0.0);
}

#endif
