/* sbx warm (warm.c): a sandbox made ahead of its query. Shared by warm.c, warm-mount.c, warm-inner.c. */
#ifndef SBX_WARM_H
#define SBX_WARM_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define WARM_MAX_JOB (4u << 20)

struct warm_job {
  char *raw;          /* the strings as received, handed on to the inner unchanged */
  uint32_t raw_len;
  char **argv;        /* raw split at its NULs */
  int argc;
};

void warm_die(const char *what) __attribute__((noreturn));
int warm_read_full(int fd, void *buf, size_t n);
int warm_read_job(int fd, struct warm_job *job);
int cmd_warm(int argc, char **argv);

/* warm-mount.c: the outer's part of a job (cgroups, the overlay in the inner's mount namespace). */
void warm_outer_prepare(const struct warm_job *job, pid_t inner, int mnt_ns);
/* sbx.c: removes the marker a `volatile` overlay leaves in a reused work directory. */
void clear_volatile_marker(const char *work);
/* sbx.c: a further overlay (a mounted context) at a path inside the merged tree. */
int mount_overlay_at(const char *merged, const char *spec, const char **what);

/* warm-inner.c: pid 1 of the sandbox, from its birth to the command's end. */
void warm_inner(int go, int ready, const char *base) __attribute__((noreturn));
#endif
