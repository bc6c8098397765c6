/*
 * FNV-1a, the one hash of the interposer: over 32-bit words (communicator member lists: shape
 * deduplication and the online mode's stream ids) and over strings (host names). No MPI in here:
 * tmpi_online_stream.h includes it and is compiled on its own by a unit test.
 */
#ifndef TUNEMPI_TMPI_HASH_H
#define TUNEMPI_TMPI_HASH_H

#include <stdint.h>

#define TMPI_FNV_OFFSET 1469598103934665603ULL
#define TMPI_FNV_PRIME 1099511628211ULL

static inline uint64_t tmpi_fnv1a_words(const int *words, int n)
{
    uint64_t hash = TMPI_FNV_OFFSET;
    for (int i = 0; i < n; i++)
        hash = (hash ^ (uint64_t)(uint32_t)words[i]) * TMPI_FNV_PRIME;
    return hash;
}

static inline uint64_t tmpi_fnv1a_string(const char *s)
{
    uint64_t hash = TMPI_FNV_OFFSET;
    for (; *s; s++)
        hash = (hash ^ (uint64_t)(unsigned char)*s) * TMPI_FNV_PRIME;
    return hash;
}

#endif
