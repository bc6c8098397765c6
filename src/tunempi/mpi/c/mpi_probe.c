/*
 * tunempi MPI probe: what an MPI library says about itself, as JSON lines on stdout.
 *
 * Compiled with the target library's mpicc and run as ONE process (singleton MPI_Init works for
 * MPICH and Open MPI). Output, one JSON object per line, flushed after each line so that a crash
 * part-way (Open MPI 4.1.4 crashes reading some control variables) still leaves everything
 * before it usable:
 *   {"kind":"library", "version_string":..., "mpi_version":[3,1], "num_cvars":N, "num_pvars":M}
 *   {"kind":"write", "name":..., "requested":V, "rc":0, "value":V}          (one per --write)
 *   {"kind":"cvar", "index":i, "name":..., "datatype":"int", "verbosity":"user_basic",
 *    "scope":"all_eq", "bind":"no_object", "writable":true, "value":0, "enum":[{"name":..,"value":..}],
 *    "enum_name":..., "description":...}
 *   {"kind":"pvar", "index":i, "name":..., "class":"counter", "datatype":..., "description":...}
 *   {"kind":"done"}
 *
 * Options:
 *   --no-values        do not read any control variable's value ("value" is absent)
 *   --skip-value I     do not read the value of control variable I (repeatable)
 *   --start I          start the control-variable listing at index I (resume after a crash)
 *   --only NAME        list only this control variable (repeatable; looked up by name)
 *   --prefix P         list only control variables whose name starts with P (repeatable)
 *   --no-pvars         do not list performance variables
 *   --write NAME=V     write the int V to control variable NAME after MPI_Init, before listing
 *                      (repeatable), and report the value read back
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_CAP 1024
#define DESC_CAP 65536
#define MAX_ARGS 256
#define MAX_ARRAY 64

struct options {
    int read_values;
    int list_pvars;
    int start;
    int n_skip;
    int skip[MAX_ARGS];
    int n_only;
    const char *only[MAX_ARGS];
    int n_prefix;
    const char *prefix[MAX_ARGS];
    int n_write;
    const char *write[MAX_ARGS];
};

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--no-values] [--skip-value I]... [--start I] [--only NAME]... [--prefix P]...\n"
            "          [--no-pvars] [--write NAME=V]...\n",
            argv0);
}

/* Write s as a JSON string literal (control characters escaped; bytes >= 0x80 passed through). */
static void json_string(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; ++p) {
        switch (*p) {
        case '"': fputs("\\\"", stdout); break;
        case '\\': fputs("\\\\", stdout); break;
        case '\n': fputs("\\n", stdout); break;
        case '\r': fputs("\\r", stdout); break;
        case '\t': fputs("\\t", stdout); break;
        default:
            if (*p < 0x20)
                printf("\\u%04x", *p);
            else
                putchar(*p);
        }
    }
    putchar('"');
}

static const char *datatype_name(MPI_Datatype type)
{
    if (type == MPI_INT) return "int";
    if (type == MPI_UNSIGNED) return "unsigned";
    if (type == MPI_UNSIGNED_LONG) return "unsigned_long";
    if (type == MPI_UNSIGNED_LONG_LONG) return "unsigned_long_long";
    if (type == MPI_COUNT) return "count";
    if (type == MPI_CHAR) return "char";
    if (type == MPI_DOUBLE) return "double";
    if (type == MPI_LONG) return "long";
    if (type == MPI_LONG_LONG) return "long_long";
    if (type == MPI_C_BOOL) return "bool";
    return "unknown";
}

static const char *verbosity_name(int verbosity)
{
    switch (verbosity) {
    case MPI_T_VERBOSITY_USER_BASIC: return "user_basic";
    case MPI_T_VERBOSITY_USER_DETAIL: return "user_detail";
    case MPI_T_VERBOSITY_USER_ALL: return "user_all";
    case MPI_T_VERBOSITY_TUNER_BASIC: return "tuner_basic";
    case MPI_T_VERBOSITY_TUNER_DETAIL: return "tuner_detail";
    case MPI_T_VERBOSITY_TUNER_ALL: return "tuner_all";
    case MPI_T_VERBOSITY_MPIDEV_BASIC: return "mpidev_basic";
    case MPI_T_VERBOSITY_MPIDEV_DETAIL: return "mpidev_detail";
    case MPI_T_VERBOSITY_MPIDEV_ALL: return "mpidev_all";
    default: return "unknown";
    }
}

static const char *scope_name(int scope)
{
    switch (scope) {
    case MPI_T_SCOPE_CONSTANT: return "constant";
    case MPI_T_SCOPE_READONLY: return "readonly";
    case MPI_T_SCOPE_LOCAL: return "local";
    case MPI_T_SCOPE_GROUP: return "group";
    case MPI_T_SCOPE_GROUP_EQ: return "group_eq";
    case MPI_T_SCOPE_ALL: return "all";
    case MPI_T_SCOPE_ALL_EQ: return "all_eq";
    default: return "unknown";
    }
}

static const char *bind_name(int bind)
{
    switch (bind) {
    case MPI_T_BIND_NO_OBJECT: return "no_object";
    case MPI_T_BIND_MPI_COMM: return "comm";
    case MPI_T_BIND_MPI_DATATYPE: return "datatype";
    case MPI_T_BIND_MPI_ERRHANDLER: return "errhandler";
    case MPI_T_BIND_MPI_FILE: return "file";
    case MPI_T_BIND_MPI_GROUP: return "group";
    case MPI_T_BIND_MPI_OP: return "op";
    case MPI_T_BIND_MPI_REQUEST: return "request";
    case MPI_T_BIND_MPI_WIN: return "win";
    case MPI_T_BIND_MPI_MESSAGE: return "message";
    case MPI_T_BIND_MPI_INFO: return "info";
    default: return "unknown";
    }
}

static const char *pvar_class_name(int var_class)
{
    switch (var_class) {
    case MPI_T_PVAR_CLASS_STATE: return "state";
    case MPI_T_PVAR_CLASS_LEVEL: return "level";
    case MPI_T_PVAR_CLASS_SIZE: return "size";
    case MPI_T_PVAR_CLASS_PERCENTAGE: return "percentage";
    case MPI_T_PVAR_CLASS_HIGHWATERMARK: return "highwatermark";
    case MPI_T_PVAR_CLASS_LOWWATERMARK: return "lowwatermark";
    case MPI_T_PVAR_CLASS_COUNTER: return "counter";
    case MPI_T_PVAR_CLASS_AGGREGATE: return "aggregate";
    case MPI_T_PVAR_CLASS_TIMER: return "timer";
    case MPI_T_PVAR_CLASS_GENERIC: return "generic";
    default: return "unknown";
    }
}

/* Print element i of a buffer of the given MPI_T datatype as a JSON value. */
static void print_element(MPI_Datatype type, const void *buffer, int i)
{
    if (type == MPI_INT) printf("%d", ((const int *)buffer)[i]);
    else if (type == MPI_UNSIGNED) printf("%u", ((const unsigned *)buffer)[i]);
    else if (type == MPI_UNSIGNED_LONG) printf("%lu", ((const unsigned long *)buffer)[i]);
    else if (type == MPI_UNSIGNED_LONG_LONG) printf("%llu", ((const unsigned long long *)buffer)[i]);
    else if (type == MPI_LONG) printf("%ld", ((const long *)buffer)[i]);
    else if (type == MPI_LONG_LONG) printf("%lld", ((const long long *)buffer)[i]);
    else if (type == MPI_COUNT) printf("%lld", (long long)((const MPI_Count *)buffer)[i]);
    else if (type == MPI_C_BOOL) fputs(((const _Bool *)buffer)[i] ? "true" : "false", stdout);
    else if (type == MPI_DOUBLE) {
        double v = ((const double *)buffer)[i];
        if (v != v || v > 1.7976931348623157e308 || v < -1.7976931348623157e308)
            fputs("null", stdout); /* NaN and infinities are not JSON */
        else
            printf("%.17g", v);
    } else
        fputs("null", stdout);
}

/* Read a control variable's value and print it as ,"value":... ; nothing is printed when unreadable. */
static void print_cvar_value(int index, MPI_Datatype type, int bind)
{
    MPI_T_cvar_handle handle;
    int count = 0;
    MPI_Comm comm = MPI_COMM_WORLD;
    void *object = NULL;
    if (bind == MPI_T_BIND_MPI_COMM)
        object = &comm;
    else if (bind != MPI_T_BIND_NO_OBJECT)
        return; /* would need an object of another kind: not worth the risk */
    if (MPI_T_cvar_handle_alloc(index, object, &handle, &count) != MPI_SUCCESS)
        return;
    if (count > 0) {
        /* 8 bytes per element covers every MPI_T datatype; +1 for a string's terminator */
        size_t bytes = (size_t)count * 8 + 1;
        char *buffer = calloc(bytes, 1);
        if (buffer && MPI_T_cvar_read(handle, buffer) == MPI_SUCCESS) {
            fputs(",\"value\":", stdout);
            if (type == MPI_CHAR) {
                buffer[bytes - 1] = '\0';
                json_string(buffer);
            } else if (count == 1) {
                print_element(type, buffer, 0);
            } else {
                putchar('[');
                for (int i = 0; i < count && i < MAX_ARRAY; ++i) {
                    if (i) putchar(',');
                    print_element(type, buffer, i);
                }
                putchar(']');
            }
            if (count > 1 && type != MPI_CHAR) printf(",\"count\":%d", count);
        }
        free(buffer);
    }
    MPI_T_cvar_handle_free(&handle);
}

static void print_enum(MPI_T_enum enumtype)
{
    char name[NAME_CAP];
    int name_len = NAME_CAP;
    int num = 0;
    if (MPI_T_enum_get_info(enumtype, &num, name, &name_len) != MPI_SUCCESS)
        return;
    fputs(",\"enum_name\":", stdout);
    json_string(name);
    fputs(",\"enum\":[", stdout);
    for (int i = 0; i < num; ++i) {
        int value = 0;
        name_len = NAME_CAP;
        if (MPI_T_enum_get_item(enumtype, i, &value, name, &name_len) != MPI_SUCCESS)
            continue;
        if (i) putchar(',');
        fputs("{\"name\":", stdout);
        json_string(name);
        printf(",\"value\":%d}", value);
    }
    putchar(']');
}

static int cvar_selected(const struct options *opt, const char *name)
{
    if (opt->n_prefix == 0)
        return 1;
    for (int i = 0; i < opt->n_prefix; ++i)
        if (strncmp(name, opt->prefix[i], strlen(opt->prefix[i])) == 0)
            return 1;
    return 0;
}

static int value_skipped(const struct options *opt, int index)
{
    for (int i = 0; i < opt->n_skip; ++i)
        if (opt->skip[i] == index)
            return 1;
    return 0;
}

static void print_cvar(const struct options *opt, int index, char *desc)
{
    char name[NAME_CAP];
    int name_len = NAME_CAP, desc_len = DESC_CAP;
    int verbosity = 0, bind = 0, scope = 0;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_T_enum enumtype = MPI_T_ENUM_NULL;
    desc[0] = '\0';
    if (MPI_T_cvar_get_info(index, name, &name_len, &verbosity, &type, &enumtype, desc, &desc_len,
                            &bind, &scope) != MPI_SUCCESS)
        return; /* invalid index (e.g. a variable that went away): skip it */
    if (!cvar_selected(opt, name))
        return;
    printf("{\"kind\":\"cvar\",\"index\":%d,\"name\":", index);
    json_string(name);
    printf(",\"datatype\":\"%s\",\"verbosity\":\"%s\",\"scope\":\"%s\",\"bind\":\"%s\",\"writable\":%s",
           datatype_name(type), verbosity_name(verbosity), scope_name(scope), bind_name(bind),
           (scope == MPI_T_SCOPE_CONSTANT || scope == MPI_T_SCOPE_READONLY) ? "false" : "true");
    /* Flush before the read: if it crashes the caller still knows which variable did it. */
    fflush(stdout);
    if (opt->read_values && !value_skipped(opt, index))
        print_cvar_value(index, type, bind);
    if (enumtype != MPI_T_ENUM_NULL)
        print_enum(enumtype);
    fputs(",\"description\":", stdout);
    json_string(desc);
    fputs("}\n", stdout);
    fflush(stdout);
}

static void print_pvar(int index, char *desc)
{
    char name[NAME_CAP];
    int name_len = NAME_CAP, desc_len = DESC_CAP;
    int verbosity = 0, var_class = 0, bind = 0, readonly = 0, continuous = 0, atomic = 0;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_T_enum enumtype = MPI_T_ENUM_NULL;
    desc[0] = '\0';
    if (MPI_T_pvar_get_info(index, name, &name_len, &verbosity, &var_class, &type, &enumtype, desc,
                            &desc_len, &bind, &readonly, &continuous, &atomic) != MPI_SUCCESS)
        return;
    printf("{\"kind\":\"pvar\",\"index\":%d,\"name\":", index);
    json_string(name);
    printf(",\"class\":\"%s\",\"datatype\":\"%s\",\"verbosity\":\"%s\",\"bind\":\"%s\","
           "\"readonly\":%s,\"continuous\":%s,\"atomic\":%s,\"description\":",
           pvar_class_name(var_class), datatype_name(type), verbosity_name(verbosity), bind_name(bind),
           readonly ? "true" : "false", continuous ? "true" : "false", atomic ? "true" : "false");
    json_string(desc);
    fputs("}\n", stdout);
    fflush(stdout);
}

/* --write NAME=V: write an int control variable, read it back, report both. */
static void write_cvar(const char *spec)
{
    char name[NAME_CAP];
    const char *eq = strchr(spec, '=');
    int index = -1, count = 0, rc, readback = 0;
    MPI_T_cvar_handle handle;
    if (!eq || (size_t)(eq - spec) >= sizeof name) {
        fprintf(stderr, "mpi_probe: --write expects NAME=VALUE, got %s\n", spec);
        exit(2);
    }
    memcpy(name, spec, (size_t)(eq - spec));
    name[eq - spec] = '\0';
    int value = atoi(eq + 1);
    fputs("{\"kind\":\"write\",\"name\":", stdout);
    json_string(name);
    printf(",\"requested\":%d", value);
    rc = MPI_T_cvar_get_index(name, &index);
    if (rc == MPI_SUCCESS)
        rc = MPI_T_cvar_handle_alloc(index, NULL, &handle, &count);
    if (rc == MPI_SUCCESS) {
        rc = MPI_T_cvar_write(handle, &value);
        if (rc == MPI_SUCCESS && MPI_T_cvar_read(handle, &readback) == MPI_SUCCESS)
            printf(",\"value\":%d", readback);
        MPI_T_cvar_handle_free(&handle);
    }
    printf(",\"rc\":%d}\n", rc);
    fflush(stdout);
}

static int parse_int(const char *text, const char *what)
{
    char *end = NULL;
    long value = strtol(text, &end, 10);
    if (!*text || *end || value < 0 || value > 1 << 30) {
        fprintf(stderr, "mpi_probe: %s expects a non-negative integer, got %s\n", what, text);
        exit(2);
    }
    return (int)value;
}

static void parse_options(int argc, char **argv, struct options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->read_values = 1;
    opt->list_pvars = 1;
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i];
        int has_value = i + 1 < argc;
        if (strcmp(arg, "--no-values") == 0) {
            opt->read_values = 0;
        } else if (strcmp(arg, "--no-pvars") == 0) {
            opt->list_pvars = 0;
        } else if (strcmp(arg, "--start") == 0 && has_value) {
            opt->start = parse_int(argv[++i], arg);
        } else if (strcmp(arg, "--skip-value") == 0 && has_value && opt->n_skip < MAX_ARGS) {
            opt->skip[opt->n_skip++] = parse_int(argv[++i], arg);
        } else if (strcmp(arg, "--only") == 0 && has_value && opt->n_only < MAX_ARGS) {
            opt->only[opt->n_only++] = argv[++i];
        } else if (strcmp(arg, "--prefix") == 0 && has_value && opt->n_prefix < MAX_ARGS) {
            opt->prefix[opt->n_prefix++] = argv[++i];
        } else if (strcmp(arg, "--write") == 0 && has_value && opt->n_write < MAX_ARGS) {
            opt->write[opt->n_write++] = argv[++i];
        } else {
            usage(argv[0]);
            exit(2);
        }
    }
}

int main(int argc, char **argv)
{
    struct options opt;
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int version_len = 0, major = 0, minor = 0, provided = 0, num_cvars = 0, num_pvars = 0;

    parse_options(argc, argv, &opt);
    MPI_Init(&argc, &argv);
    MPI_Get_library_version(version, &version_len);
    MPI_Get_version(&major, &minor);
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "mpi_probe: MPI_T_init_thread failed\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_T_cvar_get_num(&num_cvars);
    if (opt.list_pvars)
        MPI_T_pvar_get_num(&num_pvars);

    fputs("{\"kind\":\"library\",\"version_string\":", stdout);
    json_string(version);
    printf(",\"mpi_version\":[%d,%d],\"num_cvars\":%d,\"num_pvars\":%d}\n", major, minor, num_cvars,
           num_pvars);
    fflush(stdout);

    for (int i = 0; i < opt.n_write; ++i)
        write_cvar(opt.write[i]);

    char *desc = malloc(DESC_CAP);
    if (!desc) {
        fprintf(stderr, "mpi_probe: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (opt.n_only > 0) {
        for (int i = 0; i < opt.n_only; ++i) {
            int index = -1;
            if (MPI_T_cvar_get_index(opt.only[i], &index) == MPI_SUCCESS)
                print_cvar(&opt, index, desc);
            else {
                fputs("{\"kind\":\"missing\",\"name\":", stdout);
                json_string(opt.only[i]);
                fputs("}\n", stdout);
            }
        }
    } else {
        for (int i = opt.start; i < num_cvars; ++i)
            print_cvar(&opt, i, desc);
    }
    for (int i = 0; i < num_pvars; ++i)
        print_pvar(i, desc);
    free(desc);

    puts("{\"kind\":\"done\"}");
    fflush(stdout);
    MPI_T_finalize();
    MPI_Finalize();
    return 0;
}
