/*
 * The outer's part of a warm sandbox's job (warm.c): what needs the host's privileges. It puts
 * itself and the inner into the query's cgroups, enters the inner's mount namespace and mounts the
 * overlay there with exactly the options of `sbx run` (sbx.c), plus nosuid and nodev (bubblewrap's
 * bind of it as `/` adds those today), then the further overlays of mounted contexts inside it
 * (`--overlay`, as `sbx run` has them) and the views it binds (`--view TARGET,PID,PATH`: the
 * read-only overlay at PATH in the mount namespace of `sbx views` PID (views.c), cloned there
 * before the sandbox's namespace is entered, made read-only, nosuid and nodev, and attached at
 * TARGET; anything at PATH but an overlay refuses the job, and the pool then starts the sandbox
 * the ordinary way).
 *
 * Cgroups: a v1 `tasks` file is opened here, the outer moves itself by writing "0" to it, and the
 * open file goes to the inner with the job, which moves itself the same way (warm-inner.c). A
 * write naming another process takes the kernel's global threadgroup lock for writing, and the
 * first such write after an idle moment waits an RCU grace period (~13 ms measured); "0" names
 * the writer's own thread and skips that lock, and the write is checked against the opener's
 * credentials (host root), not the inner's. Other join files (v2's `cgroup.procs`) get both pids
 * written here.
 */
#define _GNU_SOURCE
#include "warm.h"
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#ifndef OVERLAYFS_SUPER_MAGIC
#define OVERLAYFS_SUPER_MAGIC 0x794c7630
#endif
#define MAX_VIEWS 16

/* The views of `specs` (TARGET,PID,PATH), cloned in the views' mount namespace: their targets in `targets`. */
static void clone_views(int n, const char *const *specs, int *fds, char (*targets)[256]) {
  if (n == 0) return;
  char ns_path[64];
  const char *first = strchr(specs[0], ',');
  snprintf(ns_path, sizeof ns_path, "/proc/%ld/ns/mnt", first ? strtol(first + 1, NULL, 10) : 0L);
  int ns = open(ns_path, O_RDONLY | O_CLOEXEC);
  if (ns < 0 || setns(ns, CLONE_NEWNS) != 0) warm_die(ns_path);
  close(ns);
  for (int k = 0; k < n; k++) {
    const char *c1 = strchr(specs[k], ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL;
    if (!c1 || !c2 || c1 == specs[k] || (size_t)(c1 - specs[k]) >= 256 || strncmp(c1 + 1, first + 1, (size_t)(c2 - c1)) != 0) { errno = EINVAL; warm_die(specs[k]); }
    snprintf(targets[k], 256, "%.*s", (int)(c1 - specs[k]), specs[k]);
    fds[k] = open_tree(AT_FDCWD, c2 + 1, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    struct statfs sf;
    if (fds[k] < 0 || fstatfs(fds[k], &sf) != 0) warm_die(c2 + 1);
    if (sf.f_type != OVERLAYFS_SUPER_MAGIC) { errno = EMEDIUMTYPE; warm_die(c2 + 1); }
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
    if (mount_setattr(fds[k], "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) warm_die(c2 + 1);
  }
}

/* Attaches each cloned view at its target inside `merged` (reached as an overlay's: open_mount_point). */
static void attach_views(const char *merged, int n, const int *fds, char (*targets)[256]) {
  for (int k = 0; k < n; k++) {
    const char *what;
    int at = open_mount_point(merged, targets[k], &what);
    if (at < 0) warm_die(what);
    if (move_mount(fds[k], "", at, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0) warm_die(targets[k]);
    close(at);
    close(fds[k]);
  }
}

static void write_pid(const char *file, pid_t pid) {
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%d\n", (int)pid);
  int fd = open(file, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, buf, (size_t)n) != n) warm_die(file);
  close(fd);
}

/* A v1 `tasks` file: joined by each process writing "0" for itself. */
static int is_tasks(const char *file) {
  const char *slash = strrchr(file, '/');
  return strcmp(slash ? slash + 1 : file, "tasks") == 0;
}

int warm_outer_prepare(const struct warm_job *job, pid_t inner, int mnt_ns, int *cg_fds) {
  const char *chdir_to = NULL, *lower = NULL, *upper = NULL, *work = NULL, *merged = NULL;
  const char *overlays[16], *views[MAX_VIEWS];
  int no = 0, nv = 0, ncg = 0;
  for (int i = 0; i + 1 < job->argc && strcmp(job->argv[i], "--") != 0; i++) {
    const char *k = job->argv[i], *v = job->argv[i + 1];
    if (strcmp(k, "--cgroup") == 0) {
      if (is_tasks(v)) {
        if (ncg == WARM_MAX_CGROUPS) { errno = E2BIG; warm_die(k); }
        int fd = open(v, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, "0", 1) != 1) warm_die(v);
        cg_fds[ncg++] = fd;
      } else {
        write_pid(v, inner);
        write_pid(v, getpid());
      }
      i++;
    }
    else if (strcmp(k, "--chdir") == 0) { chdir_to = v; i++; }
    else if (strcmp(k, "--lower") == 0) { lower = v; i++; }
    else if (strcmp(k, "--upper") == 0) { upper = v; i++; }
    else if (strcmp(k, "--work") == 0) { work = v; i++; }
    else if (strcmp(k, "--merged") == 0) { merged = v; i++; }
    else if (strcmp(k, "--overlay") == 0) {
      if (no == (int)(sizeof overlays / sizeof *overlays)) { errno = E2BIG; warm_die(k); }
      overlays[no++] = v;
      i++;
    }
    else if (strcmp(k, "--view") == 0) {
      if (nv == MAX_VIEWS) { errno = E2BIG; warm_die(k); }
      views[nv++] = v;
      i++;
    }
    else if (strcmp(k, "--bind") == 0 || strcmp(k, "--ro-bind") == 0 || strcmp(k, "--setenv") == 0) i += 2;
    else if (strcmp(k, "--cwd") == 0 || strcmp(k, "--cap-add") == 0 || strcmp(k, "--hand") == 0) i++;
    else { errno = EINVAL; warm_die(k); }
  }
  if (!chdir_to || !lower || !upper || !work || !merged) { errno = EINVAL; warm_die("job without an overlay"); }
  int view_fds[MAX_VIEWS];
  char view_targets[MAX_VIEWS][256];
  clone_views(nv, views, view_fds, view_targets);
  if (setns(mnt_ns, CLONE_NEWNS) != 0) warm_die("setns");
  close(mnt_ns);
  if (chdir(chdir_to) != 0) warm_die(chdir_to);
  size_t len = strlen(lower) + strlen(upper) + strlen(work) + 128;
  char *opts = malloc(len);
  if (!opts) warm_die("malloc");
  snprintf(opts, len, "lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=off,index=off,metacopy=off,volatile", lower, upper, work);
  clear_volatile_marker(work);
  if (mount("overlay", merged, "overlay", MS_NOSUID | MS_NODEV, opts) != 0) warm_die("mount overlay");
  free(opts);
  attach_views(merged, nv, view_fds, view_targets);
  for (int k = 0; k < no; k++) {
    const char *what;
    if (mount_overlay_at(merged, overlays[k], &what) != 0) warm_die(what);
  }
  return ncg;
}
