/* Order statistics for the engine's stopping rule.
 *
 * The reported statistics are recomputed in Python from the samples (tunempi.bench.stats); this copy
 * exists so that rank 0 can decide when a point has been measured precisely enough. Both use the same
 * definition, and an integration test checks that they agree.
 */
#include <math.h>
#include <stdlib.h>

#include "engine.h"

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void tm_sort(double *values, size_t n)
{
    qsort(values, n, sizeof *values, compare_doubles);
}

/* Number of order statistics j cut from each end: the largest j with P(Binomial(n, 1/2) <= j-1) <= 2.5 %.
 * The interval [x_(j), x_(n-j+1)] (1-based) then covers the median with probability >= 95 %.
 * Below n = 6 no such j exists and the whole range is returned (coverage < 95 %). */
static size_t order_statistic_cut(size_t n)
{
    const double tail = 0.025;
    const double log_norm = lgamma((double)n + 1.0) - (double)n * log(2.0);
    double cdf = 0.0;
    size_t j = 0;
    for (size_t i = 0; i <= n / 2; i++) {
        double pmf = exp(log_norm - lgamma((double)i + 1.0) - lgamma((double)(n - i) + 1.0));
        if (cdf + pmf > tail)
            break;
        cdf += pmf;
        j = i + 1;
    }
    return j == 0 ? 1 : j;
}

tm_median_ci tm_median_confidence(const double *sorted, size_t n)
{
    tm_median_ci out;
    out.median = (n % 2) ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    size_t j = order_statistic_cut(n);
    out.ci_low = sorted[j - 1];
    out.ci_high = sorted[n - j];
    return out;
}
