"""C source of the native CPU codec kernels (built by `reference.codec.native`).

One pass per block: the difference `base - local` goes to a stack buffer while the block's absmax
is taken as an integer max over the bit patterns of |d| (for non-negative floats bit order is value
order, NaN and Inf sort above every finite value, and the loop vectorizes without -ffast-math).
Rounding is the same `(y + 1.5 * 2**23) - 1.5 * 2**23` round-half-even trick the Triton kernel
uses; the build disables FMA contraction so every product is rounded before the next add.
"""

C_SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ABS_MASK 0x7fffffffu
#define NONFINITE 0x7f800000u
#define MAGIC 12582912.0f          /* 1.5 * 2^23: adding and subtracting rounds half to even */
#define TINY 7.888609052210118e-31f /* 2^-100, see reference/codec/formats.py */
#define MAX_BLOCK 4096

static inline uint32_t fbits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float bitsf(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

/* returns the number of blocks holding NaN/Inf (0 when the packet is valid) */
int64_t coloco_enc_i8(const float *restrict base, const float *restrict local, int64_t n,
                      int64_t bs, int8_t *restrict q, float *restrict scales) {
    float tmp[MAX_BLOCK];
    int64_t nb = (n + bs - 1) / bs, bad = 0;
    for (int64_t b = 0; b < nb; b++) {
        int64_t s = b * bs, len = (n - s) < bs ? (n - s) : bs;
        const float *pb = base + s;
        uint32_t m = 0;
        if (local) {
            const float *pl = local + s;
            for (int64_t i = 0; i < len; i++) {
                float d = pb[i] - pl[i];
                uint32_t u = fbits(d) & ABS_MASK;
                tmp[i] = d;
                m = u > m ? u : m;
            }
        } else {
            for (int64_t i = 0; i < len; i++) {
                float d = pb[i];
                uint32_t u = fbits(d) & ABS_MASK;
                tmp[i] = d;
                m = u > m ? u : m;
            }
        }
        for (int64_t i = len; i < bs; i++) tmp[i] = 0.0f;
        int8_t *pq = q + s;
        if (m >= NONFINITE) {
            bad++;
            memset(pq, 0, (size_t)bs);
            scales[b] = 0.0f;
            continue;
        }
        float amax = bitsf(m), inv = 0.0f, sc = 0.0f;
        if (amax >= TINY) { inv = 127.0f / amax; sc = amax / 127.0f; }
        for (int64_t i = 0; i < bs; i++) {
            float y = tmp[i] * inv;
            y = (y + MAGIC) - MAGIC;
            pq[i] = (int8_t)(int32_t)y;
        }
        scales[b] = sc;
    }
    return bad;
}

void coloco_dec_i8(const int8_t *restrict q, const float *restrict scales, int64_t n,
                   int64_t bs, float *restrict out, int accumulate) {
    int64_t nb = (n + bs - 1) / bs;
    for (int64_t b = 0; b < nb; b++) {
        int64_t s = b * bs, len = (n - s) < bs ? (n - s) : bs;
        const int8_t *pq = q + s;
        float *po = out + s, sc = scales[b];
        if (accumulate) {
            for (int64_t i = 0; i < len; i++) po[i] += (float)pq[i] * sc;
        } else {
            for (int64_t i = 0; i < len; i++) po[i] = (float)pq[i] * sc;
        }
    }
}

static inline uint16_t to_bf16(float x) {
    uint32_t u = fbits(x);
    if ((u & ABS_MASK) > NONFINITE) return 0x7fc0;                  /* NaN, as torch */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);       /* round half to even */
}

/* fmt 0: fp32 out (float*), fmt 1: bf16 out (uint16_t*); returns 1 if any value is NaN/Inf */
int64_t coloco_enc_dense(const float *restrict base, const float *restrict local, int64_t n,
                         int fmt, void *restrict out) {
    uint32_t m = 0;
    const int64_t chunk = 4096;
    for (int64_t s = 0; s < n; s += chunk) {
        int64_t len = (n - s) < chunk ? (n - s) : chunk;
        const float *pb = base + s;
        const float *pl = local ? local + s : 0;
        if (fmt == 0) {
            float *po = (float *)out + s;
            for (int64_t i = 0; i < len; i++) {
                float d = pl ? pb[i] - pl[i] : pb[i];
                uint32_t u = fbits(d) & ABS_MASK;
                po[i] = d;
                m = u > m ? u : m;
            }
        } else {
            uint16_t *po = (uint16_t *)out + s;
            for (int64_t i = 0; i < len; i++) {
                float d = pl ? pb[i] - pl[i] : pb[i];
                uint32_t u = fbits(d) & ABS_MASK;
                po[i] = to_bf16(d);
                m = u > m ? u : m;
            }
        }
    }
    return m >= NONFINITE ? 1 : 0;
}

void coloco_dec_bf16(const uint16_t *restrict in, int64_t n, float *restrict out,
                     int accumulate) {
    for (int64_t i = 0; i < n; i++) {
        float v = bitsf((uint32_t)in[i] << 16);
        if (accumulate) out[i] += v; else out[i] = v;
    }
}

/* The sparse format's selection (reference/codec/sparse.py), bit for bit: per chunk the k
   largest keys bits(|x|) << 16 | (65535 - offset) (unique: the set does not depend on the
   algorithm; padding past n ranks below every real value, lower offsets first), found in one
   pass keeping the k largest (k <= FEW) or with a quickselect; offsets ascending;
   step = amax / (L - 0.5) (one fp32 division); codes floor(v / step) + L clamped. Returns the
   number of NaN/Inf values (0: a valid packet). */
#define FEW 32 /* k up to this: kth_largest_few (one pass); above: quickselect */
static int64_t kth_largest(int64_t *a, int64_t len, int64_t k) {
    /* quickselect: the k-th largest of a[0..len) (a is reordered) */
    int64_t lo = 0, hi = len - 1, want = k - 1;
    while (lo < hi) {
        int64_t pivot = a[lo + (hi - lo) / 2], i = lo, j = hi;
        while (i <= j) {
            while (a[i] > pivot) i++;
            while (a[j] < pivot) j--;
            if (i <= j) { int64_t t = a[i]; a[i] = a[j]; a[j] = t; i++; j--; }
        }
        if (want <= j) hi = j; else if (want >= i) lo = i; else return a[want];
    }
    return a[want];
}

static int64_t kth_largest_few(const int64_t *keys, int64_t len, int64_t k, int64_t *top) {
    /* the k-th largest of keys[0..len) for a small k: top[0..k) holds the k largest seen so far,
       ascending, so most keys are refused by one comparison with top[0] (keys are unique) */
    for (int64_t i = 0; i < k; i++) {
        int64_t v = keys[i], j = i;
        while (j > 0 && top[j - 1] > v) { top[j] = top[j - 1]; j--; }
        top[j] = v;
    }
    for (int64_t i = k; i < len; i++) {
        int64_t v = keys[i];
        if (v <= top[0]) continue;
        int64_t j = 1;
        while (j < k && top[j] < v) { top[j - 1] = top[j]; j++; }
        top[j - 1] = v;
    }
    return top[0];
}

int64_t coloco_sparse_select(const float *restrict x, int64_t n, int64_t chunk, int64_t k,
                             int64_t levels, int64_t *restrict offsets,
                             int64_t *restrict codes, float *restrict steps) {
    int64_t *keys = malloc(2 * chunk * sizeof(int64_t)), *work = keys + chunk;
    if (!keys) return -1;
    int64_t chunks = (n + chunk - 1) / chunk, bad = 0;
    float half = (float)levels - 0.5f;
    for (int64_t c = 0; c < chunks; c++) {
        int64_t s = c * chunk, len = (n - s) < chunk ? (n - s) : chunk;
        const float *px = x + s;
        for (int64_t i = 0; i < chunk; i++) {
            int64_t tie = 65535 - i;
            if (i < len) {
                uint32_t u = fbits(px[i]) & ABS_MASK;
                bad += u >= NONFINITE;
                keys[i] = ((int64_t)u << 16) + tie;
            } else {
                keys[i] = tie - ((int64_t)1 << 48);
            }
            if (k > FEW) work[i] = keys[i];
        }
        int64_t th = k > FEW ? kth_largest(work, chunk, k) : kth_largest_few(keys, chunk, k, work);
        int64_t *po = offsets + c * k, *pq = codes + c * k, m = 0;
        float amax = 0.0f;
        for (int64_t i = 0; i < chunk && m < k; i++) {
            if (keys[i] >= th) {
                po[m++] = i;
                float v = i < len ? px[i] : 0.0f;
                float a = v < 0 ? -v : v;
                amax = a > amax ? a : amax;
            }
        }
        if (amax < TINY) {
            steps[c] = 0.0f;
            for (int64_t j = 0; j < k; j++) pq[j] = levels;
            continue;
        }
        float step = amax / half;
        steps[c] = step;
        for (int64_t j = 0; j < k; j++) {
            float v = po[j] < len ? px[po[j]] : 0.0f;
            int64_t q = (int64_t)floorf(v / step) + levels;
            pq[j] = q < 0 ? 0 : (q > 2 * levels - 1 ? 2 * levels - 1 : q);
        }
    }
    free(keys);
    return bad;
}
/* The count-sketch of reference/sketch.py (Projection.apply): coordinate start + i goes to slot
   2 * bucket + (sign is +1) by the reference's mixer. The reference keeps every step's product
   below 2^63 in int64 and masks it to 32 bits, which is arithmetic mod 2^32: uint32 here, so the
   hashes of a block vectorize. Each value is added in float64 in index order, the serial loop
   of torch.bincount, so the sums are its bits. Up to MAX_PARTS vectors share the block's
   hashes: part p's value is xs[p][i] (NULL: the part is skipped), part 0's the float32
   difference sub[i] - xs[0][i] when sub is given (the pseudo-gradient so far). sums: parts x
   2 * buckets doubles, zeroed by the caller (a value that is not finite is added as it is, as
   torch's). */
#define MAX_PARTS 4
#define SKETCH_BLOCK 2048
void coloco_count_sketch(const float *const *xs, const float *restrict sub, int64_t parts,
                         int64_t n, int64_t start, uint64_t a, uint64_t b, int64_t buckets,
                         double *restrict sums) {
    const uint32_t a32 = (uint32_t)a, b32 = (uint32_t)b, mask = (uint32_t)buckets - 1;
    uint32_t slot[SKETCH_BLOCK];
    for (int64_t i0 = 0; i0 < n; i0 += SKETCH_BLOCK) {
        int64_t len = n - i0 < SKETCH_BLOCK ? n - i0 : SKETCH_BLOCK;
        uint32_t x0 = (uint32_t)(start + i0);
        for (int64_t j = 0; j < len; j++) {
            uint32_t h = a32 * (x0 + (uint32_t)j) + b32;
            h ^= h >> 16;
            h *= 0x7FEB352Du;
            h ^= h >> 15;
            h *= 0x2C1B3C6Du;
            h ^= h >> 16;
            slot[j] = (h & mask) * 2 + (h >> 31);
        }
        for (int64_t p = 0; p < parts && p < MAX_PARTS; p++) {
            const float *x = xs[p];
            double *out = sums + p * 2 * buckets;
            if (!x) continue;
            x += i0;
            if (p == 0 && sub) {
                const float *s = sub + i0;
                for (int64_t j = 0; j < len; j++) out[slot[j]] += (double)(s[j] - x[j]);
            } else {
                for (int64_t j = 0; j < len; j++) out[slot[j]] += (double)x[j];
            }
        }
    }
}

/* The sum of squares of a[i] - b[i] (of a[i] when b is NULL), each difference taken in fp32
   (as torch's a - b) and squared and summed in float64: the square of
   torch.linalg.vector_norm(a - b, dtype=torch.float64) up to the order of the float64 sum (8
   lanes, then the lanes in order), in one pass and no temporary. A NaN, or a difference that
   overflows fp32, makes it NaN or infinite, as torch's. */
#define SQ_LANES 8
double coloco_sq_diff(const float *restrict a, const float *restrict b, int64_t n) {
    double acc[SQ_LANES] = {0};
    int64_t i = 0;
    if (b) {
        for (; i + SQ_LANES <= n; i += SQ_LANES)
            for (int l = 0; l < SQ_LANES; l++) {
                double d = (double)(a[i + l] - b[i + l]);
                acc[l] += d * d;
            }
        for (; i < n; i++) {
            double d = (double)(a[i] - b[i]);
            acc[0] += d * d;
        }
    } else {
        for (; i + SQ_LANES <= n; i += SQ_LANES)
            for (int l = 0; l < SQ_LANES; l++) {
                double d = (double)a[i + l];
                acc[l] += d * d;
            }
        for (; i < n; i++) acc[0] += (double)a[i] * (double)a[i];
    }
    double total = 0.0;
    for (int l = 0; l < SQ_LANES; l++) total += acc[l];
    return total;
}
"""
