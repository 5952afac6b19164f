/*
 * sbx copy SRC DST
 *     Copies a sparse file (a machine's RAM file on tmpfs) keeping its holes:
 *     only the extents SEEK_DATA finds are read, split between two threads,
 *     since a fork's source stays paused for exactly this long. Pages of zeros
 *     in them are left out too (the copy starts as one hole, which reads as
 *     zeros): they cost the copy nothing to write and take no memory.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define THREADS 2
#define CHUNK (1 << 20)
#define PAGE 4096

struct extent { off_t start, len; };
struct job { int in, out; struct extent *ext; size_t n; off_t from, to; int err; };

static struct extent *extents(int fd, off_t size, size_t *count) {
  size_t cap = 64, n = 0;
  struct extent *e = malloc(cap * sizeof *e);
  off_t at = 0;
  while (e && at < size) {
    off_t data = lseek(fd, at, SEEK_DATA);
    if (data < 0) break; /* ENXIO: no data after `at` */
    off_t hole = lseek(fd, data, SEEK_HOLE);
    if (hole < 0) hole = size;
    if (n == cap) { cap *= 2; e = realloc(e, cap * sizeof *e); if (!e) break; }
    e[n++] = (struct extent){ data, hole - data };
    at = hole;
  }
  *count = n;
  return e;
}

/* Whether the n bytes at p (word-aligned) are all zero. */
static int all_zero(const char *p, size_t n) {
  const unsigned long *w = (const void *)p;
  size_t words = n / sizeof *w;
  for (size_t i = 0; i < words; i++) if (w[i]) return 0;
  for (size_t i = words * sizeof *w; i < n; i++) if (p[i]) return 0;
  return 1;
}

static int write_all(int fd, const char *p, size_t n, off_t at) {
  while (n > 0) {
    ssize_t w = pwrite(fd, p, n, at);
    if (w < 0) return errno;
    p += w; n -= (size_t)w; at += w;
  }
  return 0;
}

/* Length of the page of a buffer of `got` bytes that starts at `at`. */
static size_t page_at(ssize_t at, ssize_t got) { return got - at < PAGE ? (size_t)(got - at) : PAGE; }

/* Copies the bytes of the extents that fall in [from, to), but for pages of zeros. */
static void *copy_range(void *arg) {
  struct job *j = arg;
  char *buf = malloc(CHUNK);
  if (!buf) { j->err = ENOMEM; return NULL; }
  for (size_t i = 0; i < j->n && !j->err; i++) {
    off_t s = j->ext[i].start, e = s + j->ext[i].len;
    if (s < j->from) s = j->from;
    if (e > j->to) e = j->to;
    while (s < e) {
      size_t want = (size_t)(e - s) < CHUNK ? (size_t)(e - s) : CHUNK;
      ssize_t got = pread(j->in, buf, want, s);
      if (got <= 0) { j->err = got < 0 ? errno : EIO; break; }
      for (ssize_t at = 0; at < got && !j->err;) {
        while (at < got && all_zero(buf + at, page_at(at, got))) at += (ssize_t)page_at(at, got);
        ssize_t end = at;
        while (end < got && !all_zero(buf + end, page_at(end, got))) end += (ssize_t)page_at(end, got);
        if (end > at) j->err = write_all(j->out, buf + at, (size_t)(end - at), s + at);
        at = end;
      }
      s += got;
    }
  }
  free(buf);
  return NULL;
}

int cmd_copy(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "sbx copy SRC DST\n"); return 2; }
  int in = open(argv[0], O_RDONLY | O_CLOEXEC);
  if (in < 0) { fprintf(stderr, "sbx: %s: %s\n", argv[0], strerror(errno)); return 1; }
  struct stat st;
  if (fstat(in, &st) != 0) { fprintf(stderr, "sbx: stat: %s\n", strerror(errno)); return 1; }
  int out = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out < 0 || ftruncate(out, st.st_size) != 0) { fprintf(stderr, "sbx: %s: %s\n", argv[1], strerror(errno)); return 1; }
  size_t n;
  struct extent *ext = extents(in, st.st_size, &n);
  if (!ext) { fprintf(stderr, "sbx: out of memory\n"); return 1; }
  off_t total = 0;
  for (size_t i = 0; i < n; i++) total += ext[i].len;
  /* Split by data bytes, not by offsets: each thread gets about half of what there is to copy. */
  off_t half = 0, seen = 0;
  for (size_t i = 0; i < n && !half; i++) {
    if (seen + ext[i].len >= total / 2) half = ext[i].start + (total / 2 - seen);
    seen += ext[i].len;
  }
  if (!half) half = st.st_size;
  struct job jobs[THREADS] = {
    { in, out, ext, n, 0, half, 0 },
    { in, out, ext, n, half, st.st_size, 0 },
  };
  pthread_t th;
  int threaded = pthread_create(&th, NULL, copy_range, &jobs[1]) == 0;
  copy_range(&jobs[0]);
  if (threaded) pthread_join(th, NULL); else copy_range(&jobs[1]);
  for (int i = 0; i < THREADS; i++) {
    if (jobs[i].err) { fprintf(stderr, "sbx copy: %s\n", strerror(jobs[i].err)); return 1; }
  }
  if (close(out) != 0) { fprintf(stderr, "sbx copy: close: %s\n", strerror(errno)); return 1; }
  return 0;
}
