/*
 * sbx-tarcheck --blob (tarcheck.c): the stream as sent (a registry's blob, before
 * decompression) read from stdin by a thread that hashes and counts it on its way into a pipe,
 * whose other end the decompressor (or tarcheck's own tar reading) takes as its input.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <openssl/evp.h>
#include "tarcheck.h"

static EVP_MD_CTX *md;
static unsigned long long max, bytes;
static int out = -1;
static pthread_t thread;
static void (*stop)(void);

int blob_open(unsigned long long most, void (*stop_children)(void)) {
  int p[2];
  md = EVP_MD_CTX_new();
  if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) return -1;
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  (void)fcntl(p[1], F_SETPIPE_SZ, 256 << 10);
  max = most;
  stop = stop_children;
  out = p[1];
  return p[0];
}

static int failing;

int blob_failing(void) { return __atomic_load_n(&failing, __ATOMIC_SEQ_CST); }

/* Ends the process from the thread: a line for the server on stdout (one write), or a message.
   Marked first: the children it stops end the main thread's reading, which must not answer for them. */
static void fail(int code, const char *line) {
  __atomic_store_n(&failing, 1, __ATOMIC_SEQ_CST);
  if (code == 65) { if (write(1, line, strlen(line)) < 0) { /* nobody to tell */ } }
  else fprintf(stderr, "sbx-tarcheck: %s\n", line);
  stop();
  _exit(code);
}

static void *pump(void *arg) {
  (void)arg;
  static unsigned char b[1 << 17];
  unsigned long long told = 0;
  for (;;) {
    ssize_t n = read(0, b, sizeof b);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(70, strerror(errno));
    if (n == 0) break;
    unsigned long long got = __atomic_add_fetch(&bytes, (unsigned long long)n, __ATOMIC_RELAXED);
    char line[128];
    if (got > max) {
      snprintf(line, sizeof line, "bad the layer is larger than the %llu bytes its manifest says\n", max);
      fail(65, line);
    }
    if (EVP_DigestUpdate(md, b, (size_t)n) != 1) fail(70, "sha256");
    if (got - told >= (4 << 20)) {
      int len = snprintf(line, sizeof line, "got %llu\n", got);
      if (write(1, line, (size_t)len) < 0) { /* the server stopped listening: its end tells */ }
      told = got;
    }
    for (unsigned char *p = b; n > 0;) {
      ssize_t w = write(out, p, (size_t)n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) { close(out); return NULL; } /* the reader stopped: what it says decides */
      p += w;
      n -= w;
    }
  }
  close(out);
  return NULL;
}

int blob_start(void) {
  return pthread_create(&thread, NULL, pump, NULL) == 0 ? 0 : -1;
}

unsigned long long blob_bytes(void) {
  return md ? __atomic_load_n(&bytes, __ATOMIC_RELAXED) : 0;
}

int blob_end(unsigned char digest[32]) {
  unsigned int len = 0;
  pthread_join(thread, NULL);
  return EVP_DigestFinal_ex(md, digest, &len) == 1 && len == 32 ? 0 : -1;
}
