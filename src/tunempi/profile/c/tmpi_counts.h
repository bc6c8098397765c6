/*
 * The shape of a vector collective's counts (alltoallv, allgatherv, gatherv, scatterv, reduce_scatter), in
 * the terms of the bench engine's count distributions (bench/c/engine.h, tm_distribution), so that `tune
 * --from-profile` can measure a collective as the application calls it. Pure C (no MPI): the profile mode
 * calls it on the counts arrays a rank passes (tmpi_profile.c), tests compile it on its own.
 *
 * One counts array of n entries (n >= 2, one block per peer; entries <= 0 are empty blocks):
 *   sparse:  at least floor(n / 2) blocks empty. The engine's sparse leaves floor(n / 2) of n blocks empty
 *            (allgatherv, gatherv, scatterv: the odd ranks') or n - 1 (alltoallv: it sends to the next rank
 *            only); equal counts leave none.
 *   skewed:  otherwise, the largest block at least TMPI_SKEW_RATIO (1.25) x the mean block. The engine's
 *            skewed ramp (rank r's block 2 (r + 1) / (n + 1) x the mean) puts the largest at 2n / (n + 1) x
 *            the mean: 4/3 at 2 ranks, towards 2 above; equal counts put it at 1, and counts that vary by a
 *            few percent (keys bucketed at random) stay below.
 *   uniform: every other array, and arrays with no bytes at all (n < 2, or every block empty).
 * One pass over the array, no allocation. docs/profile.md ("Count shapes") says the same.
 */
#ifndef TUNEMPI_TMPI_COUNTS_H
#define TUNEMPI_TMPI_COUNTS_H

#include <stdint.h>

enum { TMPI_COUNTS_UNIFORM = 0, TMPI_COUNTS_SKEWED = 1, TMPI_COUNTS_SPARSE = 2, TMPI_COUNTS_SHAPES = 3 };

#define TMPI_SKEW_RATIO 1.25

static inline int tmpi_counts_shape(const int *counts, int n)
{
    uint64_t sum = 0;
    int largest = 0, empty = 0;
    for (int i = 0; i < n; i++) {
        int c = counts[i];
        if (c <= 0) {
            empty++;
        } else {
            sum += (uint64_t)c;
            if (c > largest)
                largest = c;
        }
    }
    if (n < 2 || sum == 0)
        return TMPI_COUNTS_UNIFORM;
    if (empty >= n / 2)
        return TMPI_COUNTS_SPARSE;
    if ((double)largest * (double)n >= TMPI_SKEW_RATIO * (double)sum)
        return TMPI_COUNTS_SKEWED;
    return TMPI_COUNTS_UNIFORM;
}

/* The stronger of two shapes (sparse > skewed > uniform): alltoallv's send and receive counts. */
static inline int tmpi_counts_stronger(int a, int b) { return a > b ? a : b; }

#endif
