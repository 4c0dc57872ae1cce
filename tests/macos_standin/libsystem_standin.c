/*
 * TEST-ONLY stand-in for the few macOS libSystem calls that stageload.meter._macos makes, so that
 * the macOS reader, the Sampler and the guard can run on Linux. Built by the tests with `cc`
 * (tests/macos_standin/libsystem_standin.py) and loaded through STAGELOAD_MACOS_LIBSYSTEM. Never shipped.
 *
 * Semantics follow XNU (apple-oss-distributions/xnu), as read there:
 * - proc_pid_rusage (bsd/kern/proc_info.c, proc_pid_rusage / proc_get_rusage): a flavor this
 *   "kernel" does not know -> EINVAL; no such process -> ESRCH; another user's -> EPERM; an
 *   exited but unreaped process (zombie) is still answered, with ri_phys_footprint 0 and
 *   ri_proc_exit_abstime set (proc_exit stores them); the copy-out is exactly
 *   sizeof(struct rusage_info_vN) of the flavor asked for. Returns -1 and sets errno on error.
 * - sysctlbyname (bsd/kern/kern_sysctl.c): unknown name -> ENOENT; oldp NULL -> size only;
 *   a buffer too small -> partial copy and ENOMEM; a new value -> EPERM (all are read-only).
 * - host_statistics64(HOST_VM_INFO64) (osfmk/kern/host.c): another flavor ->
 *   KERN_INVALID_ARGUMENT; *count below HOST_VM_INFO64_REV0_COUNT -> KERN_FAILURE; fills
 *   struct vm_statistics64 (osfmk/mach/vm_statistics.h, 152 bytes) and sets *count to 38.
 * - host_page_size: the kernel's page size (16384 on Apple Silicon).
 * - proc_reset_footprint_interval (libsyscall libproc.c -> proc_rlimit_control,
 *   bsd/kern/kern_resource.c): ESRCH for no process (a zombie is not found either), EACCES for
 *   another user, EINVAL on a kernel without CONFIG_LEDGER_INTERVAL_MAX. Built without this
 *   symbol when STANDIN_NO_FOOTPRINT_INTERVAL is defined (a libSystem older than 10.14).
 *
 * The numbers come from the file named by STAGELOAD_STANDIN_STATE, re-read on every call, so
 * a test (and every subprocess of a guard) sees what the test wrote last. One "key value" per
 * line, values decimal integers. System keys (absent = that sysctl does not exist):
 *   page_size memsize memsize_usable level pressure swap_total swap_avail swap_used
 *   free active inactive wire internal purgeable compressor external speculative (pages)
 *   max_flavor (highest rusage flavor known, default 4) interval (0 = no interval ledger)
 *   host_fail (1 = host_statistics64 fails)
 * Per process (suffix .PID): footprint lifetime_max interval_max zombie eperm.
 * Processes themselves are Linux's real ones: a pid with no /proc entry is gone (ESRCH), state
 * Z in /proc/PID/stat is a zombie; footprint defaults to VmRSS, both maxima to VmHWM, and a
 * footprint-interval reset writes 5 to /proc/PID/clear_refs (which resets VmHWM).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int kern_return_t;
typedef unsigned int mach_port_t;
typedef unsigned int natural_t;
typedef int integer_t;
typedef unsigned int mach_msg_type_number_t;
typedef uintptr_t vm_size_t;

#define KERN_SUCCESS 0
#define KERN_INVALID_ARGUMENT 4
#define KERN_FAILURE 5
#define KERN_INVALID_HOST 22
#define HOST_VM_INFO64 4
#define STANDIN_HOST_PORT 0x103u

struct vm_statistics64 {
    natural_t free_count, active_count, inactive_count, wire_count;
    uint64_t zero_fill_count, reactivations, pageins, pageouts, faults, cow_faults, lookups,
        hits, purges;
    natural_t purgeable_count, speculative_count;
    uint64_t decompressions, compressions, swapins, swapouts;
    natural_t compressor_page_count, throttled_count, external_page_count, internal_page_count;
    uint64_t total_uncompressed_pages_in_compressor;
} __attribute__((aligned(8)));

_Static_assert(sizeof(struct vm_statistics64) == 152, "vm_statistics64 is 152 bytes in XNU");
#define HOST_VM_INFO64_COUNT ((mach_msg_type_number_t)(sizeof(struct vm_statistics64) / sizeof(integer_t)))
#define HOST_VM_INFO64_REV0_COUNT (HOST_VM_INFO64_COUNT - 14)

struct xsw_usage {
    uint64_t xsu_total, xsu_avail, xsu_used;
    uint32_t xsu_pagesize;
    int xsu_encrypted;
};

/* rusage_info_vN: uint8_t ri_uuid[16] then this many uint64_t fields (bsd/sys/resource.h). */
static const int RUSAGE_FIELDS[] = {10, 16, 18, 27, 35};
enum { RI_PHYS_FOOTPRINT = 7, RI_START = 8, RI_EXIT = 9, RI_LIFETIME_MAX = 28, RI_INTERVAL_MAX = 33 };
struct rusage_any { uint8_t uuid[16]; uint64_t f[35]; };

/* -- the state file ------------------------------------------------------------------------ */
static int state_get(const char *key, long long *out)
{
    const char *path = getenv("STAGELOAD_STANDIN_STATE");
    char line[256], name[128];
    long long value;
    int found = 0;
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%127s %lld", name, &value) == 2 && strcmp(name, key) == 0) {
            *out = value;  /* the last line for a key wins */
            found = 1;
        }
    }
    fclose(f);
    return found;
}

static long long state_or(const char *key, long long fallback)
{
    long long v;
    return state_get(key, &v) ? v : fallback;
}

static int pid_key(const char *key, int pid, long long *out)
{
    char name[128];
    snprintf(name, sizeof name, "%s.%d", key, pid);
    return state_get(name, out);
}

/* -- the real process table (Linux /proc) ------------------------------------------------- */
/* 0 = no such process, 1 = running, 2 = zombie */
static int proc_state(int pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = pid > 0 ? fopen(path, "r") : NULL;
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *close = strrchr(buf, ')');
    long long z;
    if ((close && close[1] == ' ' && close[2] == 'Z') || (pid_key("zombie", pid, &z) && z))
        return 2;
    return 1;
}

static uint64_t status_kb(int pid, const char *field)
{
    char path[64], line[256];
    unsigned long long kb = 0;
    size_t len = strlen(field);
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, len) == 0 && line[len] == ':')
            sscanf(line + len + 1, "%llu", &kb);
    fclose(f);
    return (uint64_t)kb * 1024;
}

static uint64_t pid_value(const char *key, int pid, uint64_t fallback)
{
    long long v;
    return pid_key(key, pid, &v) ? (uint64_t)v : fallback;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* -- libproc ----------------------------------------------------------------------------- */
int proc_pid_rusage(int pid, int flavor, void *buffer)
{
    long long flag;
    if (flavor < 0 || flavor > state_or("max_flavor", 4) || flavor > 4) {
        errno = EINVAL;
        return -1;
    }
    int state = proc_state(pid);
    if (state == 0) {
        errno = ESRCH;
        return -1;
    }
    if (pid_key("eperm", pid, &flag) && flag) {
        errno = EPERM;
        return -1;
    }
    struct rusage_any ri;
    memset(&ri, 0, sizeof ri);
    uint64_t hwm = status_kb(pid, "VmHWM");
    ri.f[RI_START] = 1000u + (uint64_t)pid;
    ri.f[RI_PHYS_FOOTPRINT] = pid_value("footprint", pid, status_kb(pid, "VmRSS"));
    ri.f[RI_LIFETIME_MAX] = pid_value("lifetime_max", pid, hwm);
    ri.f[RI_INTERVAL_MAX] = pid_value("interval_max", pid, hwm);
    if (state == 2) {  /* proc_exit: footprint zeroed, exit time set */
        ri.f[RI_PHYS_FOOTPRINT] = 0;
        ri.f[RI_EXIT] = now_ns() | 1u;
    }
    memcpy(buffer, &ri, 16 + 8 * (size_t)RUSAGE_FIELDS[flavor]);
    return 0;
}

#ifndef STANDIN_NO_FOOTPRINT_INTERVAL
int proc_reset_footprint_interval(int pid)
{
    long long flag;
    if (proc_state(pid) != 1) {  /* proc_find() does not find zombies */
        errno = ESRCH;
        return -1;
    }
    if (pid_key("eperm", pid, &flag) && flag) {
        errno = EACCES;
        return -1;
    }
    if (!state_or("interval", 1)) {
        errno = EINVAL;
        return -1;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/clear_refs", pid);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
    return 0;
}
#endif

/* -- sysctl ------------------------------------------------------------------------------ */
static int sysctl_out(const void *value, size_t size, void *oldp, size_t *oldlenp)
{
    if (oldp == NULL) {
        *oldlenp = size;
        return 0;
    }
    size_t room = *oldlenp;
    memcpy(oldp, value, room < size ? room : size);
    *oldlenp = size;
    if (room < size) {
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

int sysctlbyname(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen)
{
    long long v;
    (void)newlen;
    if (newp != NULL) {
        errno = EPERM;
        return -1;
    }
    if (strcmp(name, "vm.swapusage") == 0 && state_get("swap_total", &v)) {
        struct xsw_usage xsw = {(uint64_t)v, (uint64_t)state_or("swap_avail", 0),
                                (uint64_t)state_or("swap_used", 0), 16384, 1};
        return sysctl_out(&xsw, sizeof xsw, oldp, oldlenp);
    }
    static const struct { const char *sysctl, *key; int size; } known[] = {
        {"hw.memsize", "memsize", 8}, {"hw.memsize_usable", "memsize_usable", 8},
        {"hw.pagesize", "page_size", 8}, {"kern.memorystatus_level", "level", 4},
        {"kern.memorystatus_vm_pressure_level", "pressure", 4},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (strcmp(name, known[i].sysctl) != 0 || !state_get(known[i].key, &v))
            continue;
        int32_t v32 = (int32_t)v;
        int64_t v64 = (int64_t)v;
        return known[i].size == 4 ? sysctl_out(&v32, 4, oldp, oldlenp)
                                  : sysctl_out(&v64, 8, oldp, oldlenp);
    }
    errno = ENOENT;
    return -1;
}

/* -- Mach host calls --------------------------------------------------------------------- */
mach_port_t mach_host_self(void)
{
    return STANDIN_HOST_PORT;
}

kern_return_t host_page_size(mach_port_t host, vm_size_t *out)
{
    if (host != STANDIN_HOST_PORT)
        return KERN_INVALID_HOST;
    *out = (vm_size_t)state_or("page_size", 16384);
    return KERN_SUCCESS;
}

kern_return_t host_statistics64(mach_port_t host, int flavor, integer_t *info,
                                mach_msg_type_number_t *count)
{
    if (host != STANDIN_HOST_PORT)
        return KERN_INVALID_HOST;
    if (flavor != HOST_VM_INFO64)
        return KERN_INVALID_ARGUMENT;
    if (*count < HOST_VM_INFO64_REV0_COUNT || state_or("host_fail", 0))
        return KERN_FAILURE;
    struct vm_statistics64 s;
    memset(&s, 0, sizeof s);
    s.free_count = (natural_t)state_or("free", 0);
    s.active_count = (natural_t)state_or("active", 0);
    s.inactive_count = (natural_t)state_or("inactive", 0);
    s.wire_count = (natural_t)state_or("wire", 0);
    s.purgeable_count = (natural_t)state_or("purgeable", 0);
    s.speculative_count = (natural_t)state_or("speculative", 0);
    s.compressor_page_count = (natural_t)state_or("compressor", 0);
    s.external_page_count = (natural_t)state_or("external", 0);
    s.internal_page_count = (natural_t)state_or("internal", 0);
    if (*count >= HOST_VM_INFO64_COUNT) {
        memcpy(info, &s, sizeof s);
        *count = HOST_VM_INFO64_COUNT;
    } else {
        memcpy(info, &s, HOST_VM_INFO64_REV0_COUNT * sizeof(integer_t));
        *count = HOST_VM_INFO64_REV0_COUNT;
    }
    return KERN_SUCCESS;
}
