/*
 * sbx-spawner --watch [-r] [-e] [-n] PATH: the changes below directory PATH,
 * from inotify, until killed. Prints "S\0" once the watches are in place, then
 * a record per event: a kind and a name relative to PATH, each NUL-terminated.
 * Kinds: c created (or moved in), w written, r removed, n renamed (moved
 * away), m attributes changed. With -r, subdirectories are watched too,
 * those created later included. With -e, a record goes on with "e" and the
 * entry of what the event names (fsops.c's fields) for c, w and m when it is
 * still there, else "-" (envd's watch events with entry info). A PATH on a
 * network file system (NFS, SMB, FUSE) is refused (EINVAL) unless -n, as envd
 * refuses one unless allowNetworkMounts. PATH itself going away ends it (exit
 * 1, "E2\n..." on stderr, as fsops.c reports errors).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>
#include "spawner.h"

enum { MASK = IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF };

struct watch { int wd; char *rel; };
static struct watch *watches;
static size_t nwatches;
static int fd, recursive, entries;
static char root[PATH_MAX];

static int failed(int err, const char *what) {
  fprintf(stderr, "E%d\n%s: %s\n", err, what, strerror(err));
  return 1;
}

static void out(const void *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(1, p, n);
    if (w < 0) { if (errno == EINTR) continue; exit(1); }
    p = (const char *)p + w;
    n -= (size_t)w;
  }
}

/* With -e: "e" and the entry of NAME (relative to the root), or "-" when it is gone. */
static void entry_of(const char *name) {
  char path[PATH_MAX * 3];
  snprintf(path, sizeof path, "%s/%s", strcmp(root, "/") == 0 ? "" : root, name);
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  int found = m && fs_entry(m, path) == 0;
  if (m) fclose(m);
  if (found) { out("e", 2); out(buf, len); } else out("-", 2);
  free(buf);
}

static void record(char kind, const char *name) {
  char head[2] = { kind, 0 };
  out(head, 2);
  out(name, strlen(name) + 1);
  if (!entries) return;
  if (kind == 'c' || kind == 'w' || kind == 'm') entry_of(name); else out("-", 2);
}

/* Whether PATH is on NFS, SMB/CIFS or FUSE (the magic numbers of linux/magic.h); -1 with errno. */
static int on_network_fs(const char *path) {
  struct statfs s;
  if (statfs(path, &s) != 0) return -1;
  switch ((uint32_t)s.f_type) {
    case 0x6969: case 0xFF534D42: case 0x517B: case 0xFE534D42: case 0x65735546: return 1;
    default: return 0;
  }
}

/* Watches REL (relative to the root, "" for it) and, recursively, its subdirectories. */
static int add(const char *rel) {
  char path[PATH_MAX * 2];
  snprintf(path, sizeof path, "%s%s%s", root, rel[0] ? "/" : "", rel);
  int wd = inotify_add_watch(fd, path, MASK | IN_ONLYDIR | IN_DONT_FOLLOW);
  if (wd < 0) return -1;
  watches = realloc(watches, (nwatches + 1) * sizeof *watches);
  if (!watches) return -1;
  watches[nwatches++] = (struct watch){ wd, strdup(rel) };
  if (!recursive) return 0;
  DIR *d = opendir(path);
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_type != DT_DIR || strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char sub[PATH_MAX * 2];
    snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
    add(sub);
  }
  closedir(d);
  return 0;
}

static struct watch *find(int wd) {
  for (size_t i = 0; i < nwatches; i++) if (watches[i].wd == wd) return &watches[i];
  return NULL;
}

int watch_main(int argc, char **argv) {
  int i = 1, network = 0;
  for (; i < argc && argv[i][0] == '-' && argv[i][1] && !argv[i][2]; i++) {
    if (argv[i][1] == 'r') recursive = 1;
    else if (argv[i][1] == 'e') entries = 1;
    else if (argv[i][1] == 'n') network = 1;
    else break;
  }
  if (i >= argc) { fprintf(stderr, "usage: sbx-spawner --watch [-r] [-e] [-n] PATH\n"); return 2; }
  if (absolute_path(argv[i], root, sizeof root) != 0) return failed(errno, argv[i]);
  struct stat st;
  if (stat(root, &st) != 0) return failed(errno, root);
  if (!S_ISDIR(st.st_mode)) return failed(ENOTDIR, root);
  int net = network ? 0 : on_network_fs(root);
  if (net < 0) return failed(errno, root);
  if (net) { fprintf(stderr, "E%d\ncannot watch %s: it is on a network file system (NFS, SMB or FUSE)\n", EINVAL, root); return 1; }
  if ((fd = inotify_init1(IN_CLOEXEC)) < 0) return failed(errno, "inotify_init1");
  if (add("") != 0) return failed(errno, root);
  out("S", 2);
  char events[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
  for (;;) {
    ssize_t n = read(fd, events, sizeof events);
    if (n < 0) { if (errno == EINTR) continue; return failed(errno, "inotify"); }
    for (char *p = events; p < events + n;) {
      struct inotify_event *ev = (struct inotify_event *)p;
      p += sizeof *ev + ev->len;
      struct watch *w = find(ev->wd);
      if (!w) continue;
      if ((ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) && w->rel[0] == 0) return failed(ENOENT, "the watched directory went away");
      if (ev->mask & IN_IGNORED) { free(w->rel); *w = watches[--nwatches]; continue; }
      if (!ev->len) continue;
      char name[PATH_MAX * 2];
      snprintf(name, sizeof name, "%s%s%s", w->rel, w->rel[0] ? "/" : "", ev->name);
      if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
        record('c', name);
        if (recursive && (ev->mask & IN_ISDIR)) add(name);
      }
      if (ev->mask & IN_MODIFY) record('w', name);
      if (ev->mask & IN_DELETE) record('r', name);
      if (ev->mask & IN_MOVED_FROM) record('n', name);
      if (ev->mask & IN_ATTRIB) record('m', name);
    }
  }
}
