/* sbx warm (warm.c): a sandbox made ahead of its query. Shared by warm.c, warm-mount.c, warm-inner.c. */
#ifndef SBX_WARM_H
#define SBX_WARM_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define WARM_MAX_JOB (4u << 20)
#define WARM_MAX_CGROUPS 8   /* open cgroup files handed to the inner with a job */

struct warm_job {
  char *raw;          /* the strings as received, handed on to the inner unchanged */
  uint32_t raw_len;
  char **argv;        /* raw split at its NULs */
  int argc;
};

void warm_die(const char *what) __attribute__((noreturn));
int warm_read_full(int fd, void *buf, size_t n);
int warm_read_job(int fd, struct warm_job *job);
/* The job with `n` open files attached (SCM_RIGHTS on its length), and its receipt: at most
   WARM_MAX_CGROUPS files, their count in *n. */
int warm_send_job(int fd, const struct warm_job *job, const int *fds, int n);
int warm_recv_job(int fd, struct warm_job *job, int *fds, int *n);
int cmd_warm(int argc, char **argv);

/* warm-mount.c: the outer's part of a job (cgroups, the overlay in the inner's mount namespace).
   Returns how many open v1 `tasks` files it put in cg_fds (WARM_MAX_CGROUPS at most) for the inner to join. */
int warm_outer_prepare(const struct warm_job *job, pid_t inner, int mnt_ns, int *cg_fds);
/* sbx.c: removes the marker a `volatile` overlay leaves in a reused work directory. */
void clear_volatile_marker(const char *work);
/* sbx.c: the mount point `rel` beneath the merged tree (no symlink on the way), opened O_PATH. */
int open_mount_point(const char *merged, const char *rel, const char **what);
/* sbx.c: a further overlay (a mounted context) at a path inside the merged tree. */
int mount_overlay_at(const char *merged, const char *spec, const char **what);

/* warm-inner.c: pid 1 of the sandbox, from its birth to the command's end. */
void warm_inner(int go, int ready, const char *base) __attribute__((noreturn));
#endif
