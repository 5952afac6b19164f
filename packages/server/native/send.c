/*
 * sbx-send: one layer of a context archive (engine/transfer/format.ts) written straight into the
 * HTTP connection of the client that asked for the export, so the layer's bytes never pass
 * through the server's process.
 *
 *   sbx-send PID FD INODE PIECE_BYTES MTIME NAME PREFIX_HEX -- PACKER...
 *
 * PID and FD: the server's process and its descriptor of the client's connection (a plain TCP
 * socket on which the server has written the response's head and everything before this layer),
 * taken with pidfd_getfd(2). INODE: that socket's inode as the server saw it: a descriptor number
 * the server closed (the client went away) and gave to another connection since is refused, so
 * this never writes into anybody else's connection. PACKER: the program that writes the layer's pack to its stdout
 * after the bytes of PREFIX_HEX (store/blobs/pack.ts, `packProgram`). The pack is cut into
 * pieces of PIECE_BYTES (the last one shorter), each a tar entry named NAME followed by its
 * number in four digits or more (format.ts, `pieceEntry`), with the header `tarHeader` writes
 * (mode 0644, owner 0, MTIME), each one chunk of HTTP/1.1's chunked encoding. A thread reads and
 * hashes the next piece while the last one is written.
 *
 * stdout: a line `SHA256  ENTRY` per piece once all are written. Exit 0: all went out; 69: this
 * host never lets a helper take a connection (pidfd_open or pidfd_getfd: ENOSYS, EPERM, EACCES;
 * nothing was written: the server sends this and later layers itself); 75: taking it failed for
 * now (descriptors exhausted; nothing was written: the server sends this layer); 66: the
 * descriptor is closed or another connection now (the client went away; nothing was written); 65:
 * the packer failed; 74: the connection failed or closed; 64: bad arguments; 70: anything else.
 * The connection is the server's as much as this process's: its flags (non-blocking) are left as
 * they are, and a write that would block waits in poll(2).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <openssl/evp.h>

#define BLOCK 512

struct piece {
  unsigned char *data;
  size_t len;
  char hex[65];
  int state; /* 0 free, 1 full, 2 the last one (may be empty when the pack ended on a piece's edge) */
};

static struct piece pieces[2];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static size_t piece_bytes;
static int input = -1, failed; /* failed: the reader's exit code, 0 while all is well */
static pid_t packer;
static const unsigned char *prefix;
static size_t prefix_len;

/* Ends at once (_exit: the reader thread may be inside OpenSSL, whose exit handlers must not run
   under it), the packer's whole process group with it. */
static void die(int code, const char *what) {
  fprintf(stderr, "sbx-send: %s: %s\n", what, errno ? strerror(errno) : "failed");
  if (packer > 0) kill(-packer, SIGKILL);
  _exit(code);
}

static void hex(const unsigned char *d, unsigned n, char *out) {
  for (unsigned i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

/* Fills pieces in turn from the prefix and the packer's output, hashing each as it fills. */
static void *reader(void *arg) {
  (void)arg;
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  int at = 0, end = 0;
  size_t pre = 0;
  while (!end) {
    struct piece *p = &pieces[at];
    pthread_mutex_lock(&lock);
    while (p->state != 0) pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
    if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) { failed = 70; break; }
    p->len = 0;
    while (p->len < piece_bytes) {
      ssize_t n;
      if (pre < prefix_len) {
        n = (ssize_t)(prefix_len - pre < piece_bytes - p->len ? prefix_len - pre : piece_bytes - p->len);
        memcpy(p->data + p->len, prefix + pre, (size_t)n);
        pre += (size_t)n;
      } else {
        n = read(input, p->data + p->len, piece_bytes - p->len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) { failed = 65; break; }
        if (n == 0) { end = 1; break; }
      }
      if (EVP_DigestUpdate(md, p->data + p->len, (size_t)n) != 1) { failed = 70; break; }
      p->len += (size_t)n;
    }
    if (failed) break;
    if (end) {
      int status = 0;
      while (waitpid(packer, &status, 0) < 0 && errno == EINTR) {}
      packer = 0;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) { failed = 65; break; }
    }
    unsigned char digest[32];
    unsigned int dl = 0;
    if (EVP_DigestFinal_ex(md, digest, &dl) != 1 || dl != 32) { failed = 70; break; }
    hex(digest, 32, p->hex);
    pthread_mutex_lock(&lock);
    p->state = end ? 2 : 1;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    at ^= 1;
  }
  pthread_mutex_lock(&lock);
  pthread_cond_broadcast(&changed);
  pthread_mutex_unlock(&lock);
  EVP_MD_CTX_free(md);
  return NULL;
}

/* tarHeader of format.ts: a ustar regular file, mode 0644, owner 0:0. */
static void tar_header(unsigned char *h, const char *name, size_t size, unsigned long mtime) {
  memset(h, 0, BLOCK);
  memcpy(h, name, strlen(name));
  memcpy(h + 100, "0000644", 8);
  memcpy(h + 108, "0000000", 8);
  memcpy(h + 116, "0000000", 8);
  snprintf((char *)h + 124, 12, "%011zo", size);
  snprintf((char *)h + 136, 12, "%011lo", mtime);
  memset(h + 148, ' ', 8);
  h[156] = '0';
  memcpy(h + 257, "ustar\0" "00", 8);
  unsigned sum = 0;
  for (int i = 0; i < BLOCK; i++) sum += h[i];
  snprintf((char *)h + 148, 8, "%06o", sum);
  h[155] = ' ';
}

/* All of iov into the connection, waiting in poll(2) where it would block. */
static void send_all(int sock, struct iovec *iov, int n) {
  while (n > 0) {
    ssize_t w = writev(sock, iov, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd p = { .fd = sock, .events = POLLOUT };
      if (poll(&p, 1, -1) < 0 && errno != EINTR) die(74, "poll");
      if (p.revents & (POLLERR | POLLHUP)) { errno = EPIPE; die(74, "the connection closed"); }
      continue;
    }
    if (w < 0) die(74, "the connection");
    while (n > 0 && (size_t)w >= iov->iov_len) { w -= (ssize_t)iov->iov_len; iov++; n--; }
    if (n > 0) { iov->iov_base = (char *)iov->iov_base + w; iov->iov_len -= (size_t)w; }
  }
}

static int unhex(const char *s, unsigned char **out, size_t *len) {
  size_t n = strlen(s);
  if (n % 2) return -1;
  unsigned char *b = malloc(n / 2 + 1);
  if (!b) return -1;
  for (size_t i = 0; i < n / 2; i++) if (sscanf(s + 2 * i, "%2hhx", &b[i]) != 1) return -1;
  *out = b;
  *len = n / 2;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 10 || strcmp(argv[8], "--") != 0) {
    fprintf(stderr, "usage: sbx-send PID FD INODE PIECE_BYTES MTIME NAME PREFIX_HEX -- PACKER...\n");
    return 64;
  }
  pid_t pid = (pid_t)atoi(argv[1]);
  int fd = atoi(argv[2]);
  unsigned long long inode = strtoull(argv[3], NULL, 10);
  piece_bytes = (size_t)strtoull(argv[4], NULL, 10);
  unsigned long mtime = strtoul(argv[5], NULL, 10);
  const char *name = argv[6];
  unsigned char *pre;
  if (pid <= 0 || fd < 0 || inode == 0 || piece_bytes < BLOCK || piece_bytes > (1u << 30) || strlen(name) > 90 || unhex(argv[7], &pre, &prefix_len) != 0) {
    fprintf(stderr, "sbx-send: bad arguments\n");
    return 64;
  }
  prefix = pre;
  signal(SIGPIPE, SIG_IGN);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) die(70, "prctl");

  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  int sock = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
  if (sock < 0) {
    if (errno == ENOSYS || errno == EPERM || errno == EACCES) die(69, "taking the connection");
    if (errno == EBADF) die(66, "taking the connection");
    die(75, "taking the connection");
  }
  close(pidfd);
  struct stat st;
  if (fstat(sock, &st) != 0 || !S_ISSOCK(st.st_mode) || (unsigned long long)st.st_ino != inode) {
    errno = 0;
    die(66, "the descriptor is not the client's connection any more");
  }

  for (int i = 0; i < 2; i++) if (!(pieces[i].data = malloc(piece_bytes))) die(70, "malloc");
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) die(70, "pipe");
  (void)fcntl(p[0], F_SETPIPE_SZ, 1 << 20);
  packer = fork();
  if (packer < 0) die(70, "fork");
  if (packer == 0) {
    /* A process group of its own, which die() kills whole (bash, tar and zstd). */
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (dup2(p[1], 1) < 0) _exit(127);
    int null = open("/dev/null", O_RDONLY);
    if (null < 0 || dup2(null, 0) < 0) _exit(127);
    close(sock);
    signal(SIGPIPE, SIG_DFL);
    execvp(argv[9], argv + 9);
    fprintf(stderr, "sbx-send: %s: %s\n", argv[9], strerror(errno));
    _exit(127);
  }
  close(p[1]);
  input = p[0];

  pthread_t t;
  if (pthread_create(&t, NULL, reader, NULL) != 0) die(70, "thread");
  char *sums = NULL;
  size_t sums_len = 0;
  FILE *out = open_memstream(&sums, &sums_len);
  if (!out) die(70, "memstream");
  static const unsigned char zeros[BLOCK];
  for (int at = 0, number = 0;; at ^= 1, number++) {
    struct piece *pc = &pieces[at];
    pthread_mutex_lock(&lock);
    while (pc->state == 0 && !failed) pthread_cond_wait(&changed, &lock);
    int fail = failed, state = pc->state;
    pthread_mutex_unlock(&lock);
    if (fail) { errno = 0; die(fail, fail == 65 ? "the packer failed" : "reading the pack"); }
    /* A pack that ended on a piece's edge leaves an empty last piece, sent only as the first. */
    if (state == 2 && pc->len == 0 && number > 0) break;
    char entry[128], size[32];
    snprintf(entry, sizeof entry, "%s%04d", name, number);
    unsigned char header[BLOCK];
    tar_header(header, entry, pc->len, mtime);
    size_t pad = (BLOCK - pc->len % BLOCK) % BLOCK;
    int sl = snprintf(size, sizeof size, "%zx\r\n", BLOCK + pc->len + pad);
    struct iovec iov[5] = {
      { size, (size_t)sl }, { header, BLOCK }, { pc->data, pc->len }, { (void *)zeros, pad }, { "\r\n", 2 },
    };
    send_all(sock, iov, 5);
    fprintf(out, "%s  %s\n", pc->hex, entry);
    if (state == 2) break;
    pthread_mutex_lock(&lock);
    pc->state = 0;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
  }
  pthread_join(t, NULL);
  fclose(out);
  if (fwrite(sums, 1, sums_len, stdout) != sums_len || fflush(stdout) != 0) die(70, "stdout");
  return 0;
}
