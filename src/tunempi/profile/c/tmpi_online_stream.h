/*
 * The online mode's shared random stream: a counter-based generator, so every rank of a communicator
 * draws the same number for the same call without any communication. A draw is a pure function of
 * (seed, run, stream, index): the seed and run number come from the table file (identical on every
 * rank), the stream from the communicator's member list (identical on its members) and the index is
 * the communicator's collective-call counter (collectives on a communicator are called in the same
 * order on all its members). tunempi/online/stream.py mirrors this bit for bit; a unit test compiles
 * this header and compares.
 *
 * No MPI in here: the header is also compiled on its own by that test.
 */
#ifndef TUNEMPI_TMPI_ONLINE_STREAM_H
#define TUNEMPI_TMPI_ONLINE_STREAM_H

#include <stdint.h>

#include "tmpi_hash.h"

/* splitmix64's finaliser: a bijection on 64 bits with full avalanche. */
static inline uint64_t tmpi_mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The key of one communicator's stream in one run: computed once per communicator. */
static inline uint64_t tmpi_online_key(uint64_t seed, uint64_t run, uint64_t stream)
{
    return tmpi_mix64(seed ^ tmpi_mix64(run ^ tmpi_mix64(stream)));
}

/* Draw `index` of a stream: splitmix64 seeded with the key, as a uniform double in [0, 1) with 53
 * random bits. One multiply-add and one mix per call. */
static inline double tmpi_online_draw(uint64_t key, uint64_t index)
{
    return (double)(tmpi_mix64(key + index * 0x9e3779b97f4a7c15ULL) >> 11) * (1.0 / 9007199254740992.0);
}

static inline double tmpi_online_uniform(uint64_t seed, uint64_t run, uint64_t stream, uint64_t index)
{
    return tmpi_online_draw(tmpi_online_key(seed, run, stream), index);
}

/* FNV-1a over 32-bit words: the stream id of a communicator from its sorted world ranks. */
static inline uint64_t tmpi_online_stream_id(const int *members, int size)
{
    return tmpi_fnv1a_words(members, size);
}

/* The algorithm index for draw u given cumulative probabilities cum[0..n-1] (cum[n-1] == 1). */
static inline int tmpi_online_pick(const double *cum, int n, double u)
{
    for (int i = 0; i < n - 1; i++)
        if (u < cum[i])
            return i;
    return n - 1;
}

#endif
