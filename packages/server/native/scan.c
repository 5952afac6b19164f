/*
 * The layer scan of sbx-store, into a buffer and without exiting on an error, so that both
 * `sbx-store scan` and the threads of `sbx-store serve` use it.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include "store.h"


int out_put(struct out *o, const void *p, size_t n) {
  if (o->len + n > o->cap) {
    size_t cap = o->cap ? o->cap : 4096;
    while (cap < o->len + n) cap *= 2;
    char *q = realloc(o->p, cap);
    if (!q) return -1;
    o->p = q;
    o->cap = cap;
  }
  memcpy(o->p + o->len, p, n);
  o->len += n;
  return 0;
}

char entry_type(const char *path, const struct stat *st) {
  if (S_ISREG(st->st_mode)) return 'f';
  if (S_ISLNK(st->st_mode)) return 'l';
  if (S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0)) return 'w';
  if (S_ISDIR(st->st_mode)) {
    char v[4];
    ssize_t n = lgetxattr(path, OPAQUE_XATTR, v, sizeof v);
    return (n == 1 && v[0] == 'y') ? 'O' : 'd';
  }
  return 'o';
}

static int fail(char *err, size_t errlen, const char *what) {
  snprintf(err, errlen, "%s: %s", what, strerror(errno));
  return SCAN_FAILED;
}

/* path holds the directory (a PATH_MAX buffer); root_len is the length of the scan's root in it. */
static int scan_dir(char *path, size_t root_len, struct out *o, char *err, size_t errlen) {
  DIR *d = opendir(path);
  if (!d) return fail(err, errlen, path);
  size_t base = strlen(path);
  struct dirent *e;
  int rc = 0;
  while (rc == 0 && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (base + 1 + strlen(e->d_name) >= PATH_MAX) {
      snprintf(err, errlen, "a path is deeper than %d bytes", PATH_MAX);
      rc = SCAN_TOO_DEEP;
      break;
    }
    path[base] = '/';
    strcpy(path + base + 1, e->d_name);
    struct stat st;
    if (lstat(path, &st) != 0) { rc = fail(err, errlen, path); break; }
    char t = entry_type(path, &st);
    char head[48];
    int n = snprintf(head, sizeof head, "%c %lld ", t, (long long)(S_ISREG(st.st_mode) ? st.st_size : 0));
    const char *rel = path + root_len + 1;
    if (out_put(o, head, n) || out_put(o, rel, strlen(rel) + 1)) { errno = ENOMEM; rc = fail(err, errlen, "scan"); break; }
    if (t == 'd' || t == 'O') rc = scan_dir(path, root_len, o, err, errlen);
    path[base] = 0;
  }
  closedir(d);
  return rc;
}

int scan_tree(const char *root, struct out *o, char *err, size_t errlen) {
  char *path = malloc(PATH_MAX);
  if (!path) { errno = ENOMEM; return fail(err, errlen, "scan"); }
  if (strlen(root) >= PATH_MAX) { free(path); snprintf(err, errlen, "a path is deeper than %d bytes", PATH_MAX); return SCAN_TOO_DEEP; }
  strcpy(path, root);
  int rc = scan_dir(path, strlen(path), o, err, errlen);
  free(path);
  return rc;
}
