/*
 * sbx-store serve: the snapshotter's store operations that sit on a commit's path, in one
 * long-running process, so that a commit starts no process (here a process start costs ~3 ms
 * before it does anything). Each request runs in a thread of its own; answers may come out of order.
 *
 * Requests on stdin, one per line:   ID OP PATH        (PATH is the rest of the line)
 *   scan DIR    DIR's entries as `sbx-store scan` prints them
 *   sync DIR    syncfs(2) of the file system holding DIR
 *   clear DIR   removes DIR/work and DIR/staging (trees) and DIR/merged (a directory); absent
 *               ones are fine: what an overlay scratch holds beside its tree
 *   scratch ROOTID LIMIT_MB DIR, limit LIMIT_MB DIR
 *               as `sbx-store scratch` and `sbx-store limit` (subvol.c)
 *   delete DIR  deletes the subvolume DIR, or removes the tree DIR if it is none (not crossing
 *               into other file systems); an absent DIR is fine
 * Answers on stdout:   ID CODE LENGTH\n  then LENGTH bytes: the scan's output for code 0, else
 * what went wrong. CODE: 0 done, 3 a path deeper than PATH_MAX (scan), 1 a scratch or limit
 * failed, 2 a bad request (ID "-" when the line has no ID of digits), 125 failed.
 * It exits when its stdin closes, once the requests it has are answered.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "store.h"

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
/* Requests still running: at the end of stdin their answers are still written. */
static pthread_mutex_t busy_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle = PTHREAD_COND_INITIALIZER;
static int busy;

struct request { char *id, *op, *path; long long n[2]; };

static void write_all(const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(1, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) _exit(0); /* nobody reads the answers any more */
    p += w;
    n -= (size_t)w;
  }
}

static void answer(const char *id, int code, const char *body, size_t len) {
  char head[128];
  int n = snprintf(head, sizeof head, "%s %d %zu\n", id, code, len);
  pthread_mutex_lock(&out_lock);
  write_all(head, (size_t)n);
  write_all(body, len);
  pthread_mutex_unlock(&out_lock);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st; (void)ftw;
  int rc = (flag == FTW_DP) ? rmdir(path) : unlink(path);
  return (rc != 0 && errno != ENOENT) ? -1 : 0;
}

/* Removes a tree, never crossing into another file system; a missing one is fine. 0, or -1 with errno set. */
static int remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
  return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

static int delete_dir(const char *dir, char *err, size_t errlen) {
  struct stat st;
  if (lstat(dir, &st) != 0) {
    if (errno == ENOENT) return 0;
    snprintf(err, errlen, "%s: %s", dir, strerror(errno));
    return SCAN_FAILED;
  }
  if (S_ISDIR(st.st_mode) && st.st_ino == SUBVOL_ROOT_INO) return delete_subvolume(dir, err, errlen) ? SCAN_FAILED : 0;
  if (remove_tree(dir) != 0) { snprintf(err, errlen, "%s: %s", dir, strerror(errno)); return SCAN_FAILED; }
  return 0;
}

static int clear_scratch(const char *dir, char *err, size_t errlen) {
  static const char *trees[] = {"work", "staging"};
  char p[4096];
  for (size_t i = 0; i < 2; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, trees[i]);
    if (remove_tree(p) != 0) { snprintf(err, errlen, "%s: %s", p, strerror(errno)); return SCAN_FAILED; }
  }
  snprintf(p, sizeof p, "%s/merged", dir);
  if (rmdir(p) != 0 && errno != ENOENT) { snprintf(err, errlen, "%s: %s", p, strerror(errno)); return SCAN_FAILED; }
  return 0;
}

static int sync_fs(const char *dir, char *err, size_t errlen) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || syncfs(fd) != 0) {
    snprintf(err, errlen, "%s: %s", dir, strerror(errno));
    if (fd >= 0) close(fd);
    return SCAN_FAILED;
  }
  close(fd);
  return 0;
}

/* Splits "ID OP [NUMBER...] PATH" in place (scratch takes two numbers, limit one). 0, or -1. */
static int parse(char *line, struct request *r) {
  char *rest = line, *sp = strchr(rest, ' ');
  if (!sp || sp == line || sp - line > 20 || strspn(line, "0123456789") != (size_t)(sp - line)) return -1;
  *sp = 0;
  r->id = line;
  r->op = rest = sp + 1;
  if (!(sp = strchr(rest, ' '))) return -1;
  *sp = 0;
  rest = sp + 1;
  int numbers = !strcmp(r->op, "scratch") ? 2 : !strcmp(r->op, "limit") ? 1 : 0;
  for (int i = 0; i < numbers; i++) {
    if (!(sp = strchr(rest, ' '))) return -1;
    *sp = 0;
    if ((r->n[i] = whole(rest)) < 0) return -1;
    rest = sp + 1;
  }
  r->path = rest;
  return *rest ? 0 : -1;
}

static void *run(void *arg) {
  struct request *r = arg;
  char err[4200] = "";
  struct out o = {0};
  int code;
  if (strcmp(r->op, "scan") == 0) code = scan_tree(r->path, &o, err, sizeof err);
  else if (strcmp(r->op, "sync") == 0) code = sync_fs(r->path, err, sizeof err);
  else if (strcmp(r->op, "clear") == 0) code = clear_scratch(r->path, err, sizeof err);
  else if (strcmp(r->op, "scratch") == 0) code = make_scratch(r->path, r->n[0], r->n[1], err, sizeof err);
  else if (strcmp(r->op, "limit") == 0) code = limit_subvolume(r->path, r->n[0], err, sizeof err);
  else if (strcmp(r->op, "delete") == 0) code = delete_dir(r->path, err, sizeof err);
  else { code = 2; snprintf(err, sizeof err, "unknown operation %s", r->op); }
  if (code == 0) answer(r->id, 0, o.p ? o.p : "", o.len);
  else answer(r->id, code, err, strlen(err));
  free(o.p);
  free(r->id);
  free(r);
  pthread_mutex_lock(&busy_lock);
  if (--busy == 0) pthread_cond_signal(&idle);
  pthread_mutex_unlock(&busy_lock);
  return NULL;
}

int store_serve(int argc, char **argv) {
  (void)argv;
  if (argc != 0) { fprintf(stderr, "sbx-store serve\n"); return 2; }
  signal(SIGPIPE, SIG_IGN);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  while ((n = getline(&line, &cap, stdin)) > 0) {
    if (line[n - 1] == '\n') line[n - 1] = 0;
    struct request *r = calloc(1, sizeof *r);
    char *copy = strdup(line);
    if (!r || !copy) { fprintf(stderr, "sbx-store serve: out of memory\n"); return 125; }
    if (parse(copy, r) != 0) {
      answer(r->id ? r->id : "-", 2, "expected: ID OP [NUMBER...] PATH", 32);
      free(copy);
      free(r);
      continue;
    }
    pthread_mutex_lock(&busy_lock);
    busy++;
    pthread_mutex_unlock(&busy_lock);
    pthread_t t;
    if (pthread_create(&t, &attr, run, r) != 0) run(r);
  }
  pthread_mutex_lock(&busy_lock);
  while (busy > 0) pthread_cond_wait(&idle, &busy_lock);
  pthread_mutex_unlock(&busy_lock);
  return 0;
}
