/* tunempi benchmark engine: MPI_T control variables (algorithm switching).
 *
 * A point names an algorithm cvar and a value; the engine writes it on every rank, and puts back every
 * other cvar it wrote before, so that a point's algorithm is the only choice changed from the library's
 * own (an algorithm may call other collectives internally, e.g. MPICH's smp allreduce calls reduce and
 * bcast). Cvars written by a setup request are pinned: kept for the whole launch.
 */
#include <stdio.h>
#include <string.h>

#include "engine.h"

void tm_cvars_init(tm_cvars *cvars)
{
    memset(cvars, 0, sizeof *cvars);
    int provided;
    cvars->mpi_t = MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) == MPI_SUCCESS;
}

void tm_cvars_free(tm_cvars *cvars)
{
    for (int i = 0; i < cvars->count; i++)
        MPI_T_cvar_handle_free(&cvars->slots[i].handle);
    cvars->count = 0;
    if (cvars->mpi_t)
        MPI_T_finalize();
    cvars->mpi_t = 0;
}

tm_cvar *tm_cvar_lookup(tm_cvars *cvars, const char *name, char *why, size_t why_len)
{
    for (int i = 0; i < cvars->count; i++)
        if (strcmp(cvars->slots[i].name, name) == 0)
            return &cvars->slots[i];
    if (!cvars->mpi_t) {
        snprintf(why, why_len, "MPI_T is not available");
        return NULL;
    }
    if (cvars->count == TM_MAX_CVARS) {
        snprintf(why, why_len, "too many distinct cvars");
        return NULL;
    }
    int index;
    if (MPI_T_cvar_get_index(name, &index) != MPI_SUCCESS) {
        snprintf(why, why_len, "unknown cvar %s", name);
        return NULL;
    }
    char info_name[256], desc[16];
    int name_len = sizeof info_name, desc_len = sizeof desc, verbosity, bind, scope;
    MPI_Datatype datatype;
    MPI_T_enum enumtype;
    if (MPI_T_cvar_get_info(index, info_name, &name_len, &verbosity, &datatype, &enumtype, desc, &desc_len,
                            &bind, &scope) != MPI_SUCCESS) {
        snprintf(why, why_len, "MPI_T_cvar_get_info failed for %s", name);
        return NULL;
    }
    if (datatype != MPI_INT || bind != MPI_T_BIND_NO_OBJECT) {
        snprintf(why, why_len, "cvar %s is not an unbound int", name);
        return NULL;
    }
    tm_cvar *slot = &cvars->slots[cvars->count];
    int count;
    if (MPI_T_cvar_handle_alloc(index, NULL, &slot->handle, &count) != MPI_SUCCESS || count != 1) {
        snprintf(why, why_len, "MPI_T_cvar_handle_alloc failed for %s", name);
        return NULL;
    }
    if (MPI_T_cvar_read(slot->handle, &slot->initial) != MPI_SUCCESS) {
        MPI_T_cvar_handle_free(&slot->handle);
        snprintf(why, why_len, "MPI_T_cvar_read failed for %s", name);
        return NULL;
    }
    slot->current = slot->initial;
    slot->pinned = 0;
    snprintf(slot->name, sizeof slot->name, "%s", name);
    cvars->count++;
    return slot;
}

int tm_cvar_write(tm_cvars *cvars, tm_cvar *cvar, int value, char *why, size_t why_len)
{
    if (MPI_T_cvar_write(cvar->handle, &value) != MPI_SUCCESS) {
        snprintf(why, why_len, "MPI_T_cvar_write of %d to %s failed (read-only?)", value, cvar->name);
        return -1;
    }
    cvar->current = value;
    cvars->written = 1;
    return 0;
}

int tm_cvar_restore_except(tm_cvars *cvars, const tm_cvar *const *keep, int kept, char *why, size_t why_len)
{
    for (int i = 0; i < cvars->count; i++) {
        tm_cvar *slot = &cvars->slots[i];
        int keeping = slot->pinned;
        for (int k = 0; k < kept && !keeping; k++)
            keeping = keep[k] == slot;
        if (!keeping && slot->current != slot->initial && tm_cvar_write(cvars, slot, slot->initial, why, why_len) != 0)
            return -1;
    }
    return 0;
}
