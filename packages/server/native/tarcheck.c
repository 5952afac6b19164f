/*
 * sbx-tarcheck [--gunzip | --unzstd] [--blob MAX] -- TAR ARGS...
 *
 * Unpacks one OCI layer inside the sandbox that unpacks it (runtime/bwrap/helpers.ts), so its
 * decompressed bytes never cross the server. Reads the layer as sent on stdin, decompresses it
 * with `igzip -d` (`gzip -d` where Debian's isal is missing) or `zstd -d` (children), hashes the tar stream (the layer's diff_id), and
 * passes its entries to TAR (a child, reading its stdin) with the rules of images/oci/unpack.ts:
 * device nodes and FIFOs are dropped, a member whose name (or hard link target) has a `..`
 * component refuses the layer; the archive's end marker is written after the last entry, and
 * what follows it in the stream is read and hashed too. Tar formats: ustar, pax extended headers
 * (path, linkpath, size; global ones too), GNU long names and links.
 *
 * With --blob, the stream as sent (the registry's blob, before decompression) is hashed and
 * counted too, by a thread that passes it on (tarcheck-blob.c): more than MAX bytes refuses it.
 *
 * Reports on stdout, one per line (names with bytes outside printable ASCII as \xNN):
 *   got N             with --blob: N bytes of the blob so far (every 4 MiB)
 *   dropped NAME      a device node or FIFO left out (the first ten)
 *   dropped-count N   how many were
 *   blob sha256:HEX N with --blob: the blob's digest and size
 *   diff-id sha256:HEX
 *   refused NAME      (exit 65) a member leaves the layer's root
 *   bad MESSAGE       (exit 65) not a tar archive, or a malformed one
 * Exit 66: TAR failed (its message on stderr); 67: the decompressor failed (its message on stderr).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <openssl/evp.h>
#include "tarcheck.h"

#define BLOCK 512
#define BUF (1 << 20)
#define MAX_EXT (BUF - BLOCK)

static unsigned char buf[BUF];
static size_t pos, have;
static int in_fd = 0, out_fd = -1, tar_gone = 0;
static unsigned long long offset;
static EVP_MD_CTX *md;
static pid_t decomp = -1, tar = -1;

static void stop_children(void) {
  if (decomp > 0) kill(decomp, SIGKILL);
  if (tar > 0) kill(tar, SIGKILL);
}

static void report(const char *what, const char *name) {
  printf("%s ", what);
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)name; *p && n++ < 256; p++) {
    if (*p < 0x20 || *p >= 0x7f || *p == '\\') printf("\\x%02x", *p); else putchar(*p);
  }
  putchar('\n');
}

static int fill(size_t need);

/* With --blob, how much of it came (for a layer that fails: how far it got). */
static int blob;
static void report_got(void) {
  if (blob) printf("got %llu\n", blob_bytes());
}

/* A failed layer's end: how far the blob got, the reports out, the children killed. _exit, not
   exit: the pump thread may still be hashing, and exit's handlers would free what it uses. */
static void finish(int code) {
  if (blob && blob_failing()) for (;;) pause(); /* the pump is ending the process with its own answer */
  report_got();
  fflush(stdout);
  stop_children();
  _exit(code);
}


/* A malformed tar stream: unless what decompressed it failed (a stream cut short or damaged is
   the decompressor's to report, exit 67), exit 65 saying what is wrong. */
static void bad(const char *fmt, ...) {
  if (decomp > 0) {
    if (tar > 0) kill(tar, SIGKILL);
    pos = have = 0;
    while (fill(BUF)) pos = have = 0;
    int st;
    pid_t reaped = waitpid(decomp, &st, 0);
    if (reaped == decomp) decomp = -1;
    if (reaped > 0 && (!WIFEXITED(st) || WEXITSTATUS(st) != 0)) finish(67);
  }
  va_list ap;
  va_start(ap, fmt);
  printf("bad ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  finish(65);
}

static void die(const char *what) {
  if (blob && blob_failing()) for (;;) pause();
  fprintf(stderr, "sbx-tarcheck: %s: %s\n", what, strerror(errno));
  fflush(stdout);
  stop_children();
  _exit(70);
}

/* At least `need` unread bytes in the buffer, or 0 at the end of the stream. */
static int fill(size_t need) {
  if (have - pos >= need) return 1;
  memmove(buf, buf + pos, have - pos);
  have -= pos;
  pos = 0;
  while (have < need) {
    ssize_t n = read(in_fd, buf + have, BUF - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("read");
    if (n == 0) return 0;
    if (EVP_DigestUpdate(md, buf + have, (size_t)n) != 1) die("sha256");
    have += (size_t)n;
  }
  return 1;
}

static void put(const void *p, size_t n) {
  const char *c = p;
  while (n && !tar_gone) {
    ssize_t w = write(out_fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EPIPE) { tar_gone = 1; return; } /* tar stopped: its exit says why */
    if (w < 0) die("write");
    c += w;
    n -= (size_t)w;
  }
}

/* Passes (or, with emit 0, skips) `n` bytes of the stream. */
static void pass(unsigned long long n, int emit) {
  while (n) {
    if (have == pos && !fill(1)) bad("the tar archive ends in the middle of an entry");
    size_t k = have - pos < n ? have - pos : (size_t)n;
    if (emit) put(buf + pos, k);
    pos += k;
    offset += k;
    n -= k;
  }
}

/* Numbers no larger than this (a layer has no member of 2^50 bytes): sums with padding never wrap. */
#define MAX_NUM (1ULL << 50)

/*
 * A numeric header field, read strictly: octal digits after optional spaces, then only NULs or
 * spaces; or GNU base-256 with a first byte of exactly 0x80 (positive). Anything else (a tab, a
 * leading NUL before digits, a negative number, one past MAX_NUM) is refused: GNU tar reads
 * some of those differently, and both must agree on where each entry ends.
 */
static unsigned long long num(const unsigned char *f, size_t len, const char *what) {
  unsigned long long v = 0;
  size_t i = 0;
  if (f[0] == 0x80) {
    for (i = 1; i < len; i++) {
      if (v > (MAX_NUM >> 8)) bad("the tar archive has a %s out of range", what);
      v = v * 256 + f[i];
    }
  } else {
    while (i < len && f[i] == ' ') i++;
    for (; i < len && f[i] >= '0' && f[i] <= '7'; i++) {
      if (v > (MAX_NUM >> 3)) bad("the tar archive has a %s out of range", what);
      v = v * 8 + (unsigned)(f[i] - '0');
    }
    for (; i < len; i++) if (f[i] != 0 && f[i] != ' ') bad("the tar archive has a malformed %s", what);
  }
  if (v > MAX_NUM) bad("the tar archive has a %s out of range", what);
  return v;
}

static int checksum_ok(const unsigned char *h) {
  unsigned long sum = 0;
  for (int i = 0; i < BLOCK; i++) sum += (i >= 148 && i < 156) ? 32 : h[i];
  unsigned long stored = 0;
  int i = 148, digits = 0;
  while (i < 156 && h[i] == ' ') i++;
  for (; i < 156 && h[i] >= '0' && h[i] <= '7'; i++, digits++) stored = stored * 8 + (unsigned)(h[i] - '0');
  for (; i < 156; i++) if (h[i] != 0 && h[i] != ' ') return 0;
  return digits > 0 && stored == sum;
}

static char *field(const unsigned char *f, size_t len) { return strndup((const char *)f, strnlen((const char *)f, len)); }

static void set(char **slot, char *v) { free(*slot); *slot = v; }

/* pax records `LEN key=value\n`: path, linkpath and size are what matter here. */
static void pax(const unsigned char *d, size_t n, char **path, char **link, char **size) {
  size_t i = 0;
  while (i < n) {
    size_t len = 0, j = i;
    while (j < n && d[j] >= '0' && d[j] <= '9' && j - i < 12) len = len * 10 + (size_t)(d[j++] - '0');
    if (j >= n || d[j] != ' ' || len == 0 || len > n - i || len < (j - i) + 3 || d[i + len - 1] != '\n') bad("the tar archive has a malformed pax header");
    const char *rec = (const char *)d + j + 1, *end = (const char *)d + i + len - 1, *eq = memchr(rec, '=', (size_t)(end - rec));
    /* GNU tar skips more blanks after the length, and stops reading a header at a record with
       no `=`: refused, so that both read the same keys. */
    if (*rec == ' ' || *rec == '\t' || !eq || memchr(rec, 0, (size_t)(eq - rec))) bad("the tar archive has a malformed pax header");
    {
      size_t k = (size_t)(eq - rec);
      char *v = strndup(eq + 1, (size_t)(end - eq - 1));
      if (k >= 11 && !memcmp(rec, "GNU.sparse.", 11)) bad("the tar archive has a sparse file (GNU.sparse), which layers here may not hold");
      /* A key twice in one header: GNU tar takes the first of a 'g', the last of an 'x'. Refused. */
      char **slot = k == 4 && !memcmp(rec, "path", 4) ? path : k == 8 && !memcmp(rec, "linkpath", 8) ? link
                  : k == 4 && !memcmp(rec, "size", 4) ? size : NULL;
      if (slot && *slot) bad("the tar archive has a pax header naming a key twice");
      if (slot) *slot = v; else free(v);
    }
    i += len;
  }
}

static int leaves_root(const char *name) {
  for (const char *p = name; *p;) {
    const char *e = strchrnul(p, '/');
    if (e - p == 2 && p[0] == '.' && p[1] == '.') return 1;
    p = *e ? e + 1 : e;
  }
  return 0;
}

/* A pipe of 256 KiB where the system allows it (fewer wakeups of its two ends), else as it is.
 * Not more: pipes count against their user's budget (pipe-user-pages-soft), and the sandboxes'
 * user is the tenants' too. */
static void widen(int fd) {
  (void)fcntl(fd, F_SETPIPE_SZ, 256 << 10);
}

static pid_t child(char **argv, int in, int out) {
  pid_t p = fork();
  if (p < 0) die("fork");
  if (p == 0) {
    if ((in != 0 && dup2(in, 0) != 0) || (out != 1 && dup2(out, 1) != 1)) _exit(127);
    execvp(argv[0], argv);
    if (errno == ENOENT && !strcmp(argv[0], "igzip")) { /* Debian's isal not installed: gzip does it, slower */
      argv[0] = "gzip";
      execvp(argv[0], argv);
    }
    fprintf(stderr, "sbx-tarcheck: %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  return p;
}

int main(int argc, char **argv) {
  char *gunzip[] = {"igzip", "-d", "-c", "-q", NULL}, *unzstd[] = {"zstd", "-d", "-c", "-q", NULL}, **decompressor = NULL;
  const char *usage = "usage: sbx-tarcheck [--gunzip|--unzstd] [--blob MAX] -- TAR ARGS...\n";
  int a = 1;
  unsigned long long blob_max = 0;
  for (; a < argc && strcmp(argv[a], "--") != 0; a++) {
    if (!strcmp(argv[a], "--gunzip")) decompressor = gunzip;
    else if (!strcmp(argv[a], "--unzstd")) decompressor = unzstd;
    else if (!strcmp(argv[a], "--blob") && a + 1 < argc) {
      char *end;
      blob = 1;
      blob_max = strtoull(argv[++a], &end, 10);
      if (*end || !*argv[a]) { fputs(usage, stderr); return 2; }
    } else { fputs(usage, stderr); return 2; }
  }
  if (a + 1 >= argc) { fputs(usage, stderr); return 2; }
  signal(SIGPIPE, SIG_IGN);
  /* Whole lines, each in one write: the pump thread writes its `got` lines beside them. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  md = EVP_MD_CTX_new();
  if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) die("sha256");
  int p[2];
  int source = 0; /* what the decompressor (or the tar reading below) reads */
  if (blob && (source = blob_open(blob_max, stop_children)) < 0) die("blob pipe");
  if (decompressor) {
    if (pipe2(p, O_CLOEXEC) != 0) die("pipe");
    widen(p[1]);
    decomp = child(decompressor, source, p[1]);
    close(p[1]);
    if (source != 0) close(source);
    in_fd = p[0];
  } else {
    in_fd = source;
  }
  if (pipe2(p, O_CLOEXEC) != 0) die("pipe");
  widen(p[1]);
  tar = child(argv + a + 1, p[0], 2); /* tar's own output goes with its messages, not the reports */
  close(p[0]);
  out_fd = p[1];
  /* Started after the children are forked: a fork copies no thread that could hold a lock. */
  if (blob && blob_start() != 0) die("thread");

  char *path = NULL, *link = NULL, *size_s = NULL, *gpath = NULL, *glink = NULL, *gsize = NULL, *lname = NULL, *llink = NULL;
  unsigned char *pending = malloc(MAX_EXT);
  size_t npending = 0;
  unsigned long long dropped = 0;
  if (!pending) die("malloc");
  for (;;) {
    if (!fill(BLOCK)) {
      if (offset == 0) bad("the tar archive is empty");
      break; /* no end marker (or a last header cut short): tolerated, as GNU tar does */
    }
    const unsigned char *h = buf + pos;
    int zero = 1;
    for (int i = 0; i < BLOCK && zero; i++) zero = h[i] == 0;
    if (zero) break;
    if (!checksum_ok(h)) bad("not a tar archive (bad header checksum at byte %llu)", offset);
    char flag = (char)h[156];
    unsigned long long size = num(h + 124, 12, "size");
    if (flag == 'x' || flag == 'g' || flag == 'L' || flag == 'K') {
      if (npending + 2 * BLOCK + size > MAX_EXT) bad("the tar archive has an extended header too large");
      unsigned long long all = size + (BLOCK - size % BLOCK) % BLOCK;
      if (!fill(BLOCK + (size_t)all)) bad("the tar archive ends in the middle of an entry");
      if (flag == 'g') {
        put(buf + pos, BLOCK + (size_t)all); /* global: tar takes it now, whatever becomes of the next entry */
      } else {
        memcpy(pending + npending, buf + pos, BLOCK + (size_t)all);
        npending += BLOCK + (size_t)all;
      }
      const unsigned char *d = buf + pos + BLOCK;
      /* As GNU tar: an 'x' replaces the one before it, and a 'g' all global keys before it. */
      if (flag == 'x') {
        set(&path, NULL), set(&link, NULL), set(&size_s, NULL);
        pax(d, (size_t)size, &path, &link, &size_s);
      } else if (flag == 'g') {
        set(&gpath, NULL), set(&glink, NULL), set(&gsize, NULL);
        pax(d, (size_t)size, &gpath, &glink, &gsize);
      }
      else if (flag == 'L') set(&lname, field(d, (size_t)all)); /* GNU tar reads the padding too, up to a NUL */
      else set(&llink, field(d, (size_t)all));
      pos += BLOCK + (size_t)all;
      offset += BLOCK + all;
      continue;
    }
    char *name;
    if (path || gpath) name = strdup(path ? path : gpath);
    else if (lname) name = strdup(lname);
    else {
      char *n = field(h, 100);
      char *prefix = memcmp(h + 257, "ustar", 5) == 0 ? field(h + 345, 155) : strdup("");
      if (*prefix && asprintf(&name, "%s/%s", prefix, n) < 0) die("asprintf");
      if (!*prefix) name = strdup(n);
      free(n);
      free(prefix);
    }
    char *linkname = link ? strdup(link) : glink ? strdup(glink) : llink ? strdup(llink) : field(h + 157, 100);
    const char *sz = size_s ? size_s : gsize;
    if (sz) {
      size = 0;
      if (!*sz || strlen(sz) > 16) bad("the tar archive has a bad pax size");
      for (const char *c = sz; *c; c++) {
        if (*c < '0' || *c > '9') bad("the tar archive has a bad pax size");
        size = size * 10 + (unsigned)(*c - '0');
      }
      if (size > MAX_NUM) bad("the tar archive has a size out of range");
    }
    /* Only these types: GNU tar reads others (sparse files, volume labels, dumpdirs, 'X' headers)
       in ways a pass-through cannot follow. And only regular files have data: tar skips none
       after a link, a directory or a device, whatever its header's size says. */
    int file_type = flag == '0' || flag == '\0' || flag == '7';
    if (!file_type && !strchr("123456", flag)) bad("the tar archive has an entry of a type layers here may not hold (%c)", flag > 0x20 && flag < 0x7f ? flag : '?');
    /* A regular file's name ending in '/' is a directory to GNU tar (it reads no data after it). */
    int regular = file_type && !(*name && name[strlen(name) - 1] == '/');
    if (!regular && size != 0) bad("the tar archive has a link, directory or device with data");
    if (leaves_root(name) || (flag == '1' && leaves_root(linkname))) {
      report("refused", name);
      finish(65);
    }
    unsigned long long pad = (BLOCK - size % BLOCK) % BLOCK;
    int drop = flag == '3' || flag == '4' || flag == '6';
    if (drop) {
      if (dropped++ < 10) report("dropped", name);
    } else {
      put(pending, npending);
      put(h, BLOCK);
    }
    pos += BLOCK;
    offset += BLOCK;
    pass(size + pad, !drop);
    npending = 0;
    free(name);
    free(linkname);
    set(&path, NULL);
    set(&link, NULL);
    set(&size_s, NULL);
    set(&lname, NULL);
    set(&llink, NULL);
  }
  static const unsigned char end_marker[2 * BLOCK];
  put(end_marker, sizeof end_marker);
  close(out_fd);
  /* What follows the end marker counts for the digest too. */
  pos = have = 0;
  while (fill(BUF)) pos = have = 0;
  unsigned char digest[32];
  unsigned int dlen = 0;
  if (EVP_DigestFinal_ex(md, digest, &dlen) != 1) die("sha256");
  int st;
  if (decomp > 0) {
    close(in_fd);
    if (waitpid(decomp, &st, 0) < 0) die("waitpid");
    decomp = -1;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) finish(67);
  }
  if (waitpid(tar, &st, 0) < 0) die("waitpid");
  tar = -1;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) finish(66);
  if (blob) {
    unsigned char bd[32];
    if (blob_end(bd) != 0) die("sha256");
    printf("blob sha256:");
    for (unsigned i = 0; i < 32; i++) printf("%02x", bd[i]);
    printf(" %llu\n", blob_bytes());
  }
  printf("dropped-count %llu\ndiff-id sha256:", dropped);
  for (unsigned i = 0; i < dlen; i++) printf("%02x", digest[i]);
  printf("\n");
  return 0;
}
