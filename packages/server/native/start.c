/*
 * Starting processes for the table (procs.c): 'S' (argv and stdin bytes) and
 * 'E' (options: a stdin pipe or a PTY, user, cwd, environment, a label).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>
#include "spawner.h"
#include "procs.h"

/* Only stdin, stdout and stderr (and `keep`) go on: whatever the server inherited stays out of sandboxes. */
static void close_from_3(int keep) {
  if (keep < 0) { if (syscall(SYS_close_range, 3, ~0U, 0) != 0) for (int fd = 3; fd < 1024; fd++) close(fd); return; }
  for (int fd = 3; fd < 1024; fd++) if (fd != keep) close(fd);
  syscall(SYS_close_range, 1024, ~0U, 0);
}

/* 'S': argv, then the stdin bytes (a memfd). */
static void start_plain(struct client *c, uint32_t id, char *payload, uint32_t len) {
  char *argv[4096];
  size_t argc = 0, off = 0;
  while (off < len && payload[off] != 0 && argc < 4095) {
    argv[argc++] = payload + off;
    off += strlen(payload + off) + 1;
  }
  off++; /* the empty string that ends argv */
  argv[argc] = NULL;
  uint32_t in_len = 0;
  if (argc == 0 || off + 4 > len) { uint32_t e = EINVAL; emit(c, id, 'F', &e, 4); return; }
  memcpy(&in_len, payload + off, 4);
  off += 4;
  if (off + in_len > len) { uint32_t e = EINVAL; emit(c, id, 'F', &e, 4); return; }
  int in = memfd_create("stdin", MFD_CLOEXEC);
  if (in < 0) die("memfd_create");
  if (in_len && write(in, payload + off, in_len) != (ssize_t)in_len) die("write stdin");
  lseek(in, 0, SEEK_SET);
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) die("pipe2");
  /* vfork: the child only sets its descriptors and execs, so this process's page tables are
     neither copied nor torn down again (a sandbox's start costs one less copy of them). */
  pid_t pid = vfork();
  if (pid < 0) { uint32_t e = errno; emit(c, id, 'F', &e, 4); close(in); close(out[0]); close(out[1]); close(err[0]); close(err[1]); return; }
  if (pid == 0) {
    sigprocmask(SIG_UNBLOCK, spawn_blocked, NULL);
    if (as_agent) setsid();
    dup2(in, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    close_from_3(-1);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(in);
  close(out[1]);
  close(err[1]);
  add_proc(pid, out[0], err[0], -1, c, id);
}

struct reader { const char *p; uint32_t off, len; int bad; };

static uint32_t get_u32(struct reader *r) {
  uint32_t v = 0;
  if (r->off + 4 > r->len) { r->bad = 1; return 0; }
  memcpy(&v, r->p + r->off, 4);
  r->off += 4;
  return v;
}

static const char *get_str(struct reader *r) {
  const char *s = r->p + r->off;
  size_t n = r->off < r->len ? strnlen(s, r->len - r->off) : 0;
  if (r->off >= r->len || r->off + n >= r->len) { r->bad = 1; return ""; }
  r->off += (uint32_t)n + 1;
  return s;
}

static void child_fail(int st, int stage) {
  int e[2] = { errno, stage };
  (void)!write(st, e, sizeof e);
  _exit(127);
}

/*
 * 'E': u32 flags (START_STDIN: a pipe kept open for 'I', START_PTY: a terminal), u16 cols,
 * u16 rows, user (empty: this one), cwd (empty: the user's home), u32 count + "K=V" strings,
 * u32 count + argv, u32 length + label. The child takes the user's groups, gid, uid, HOME, USER,
 * LOGNAME, SHELL and a default PATH before the given environment, in a session of its own.
 */
static void start_ex(struct client *c, uint32_t id, char *payload, uint32_t len) {
  struct reader r = { payload, 0, len, 0 };
  uint32_t flags = get_u32(&r), size = get_u32(&r);
  const char *user = get_str(&r), *cwd = get_str(&r);
  uint32_t nenv = get_u32(&r);
  const char *env[1024];
  for (uint32_t i = 0; i < nenv && !r.bad; i++) { if (i >= 1023) r.bad = 1; else env[i] = get_str(&r); }
  uint32_t nargv = get_u32(&r);
  char *argv[4096];
  for (uint32_t i = 0; i < nargv && !r.bad; i++) { if (i >= 4095) r.bad = 1; else argv[i] = (char *)get_str(&r); }
  uint32_t label_len = get_u32(&r);
  if (r.bad || nargv == 0 || r.off + label_len > len) { fail_start(c, id, EINVAL, FAIL_SETUP); return; }
  argv[nargv] = NULL;
  int pty = (flags & START_PTY) != 0;
  int in[2] = { -1, -1 }, out[2] = { -1, -1 }, err[2] = { -1, -1 }, st[2], master = -1;
  char slave[64] = "";
  if (pipe2(st, O_CLOEXEC)) die("pipe2");
  if (pty) {
    master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    struct winsize ws = { .ws_col = (unsigned short)(size & 0xffff), .ws_row = (unsigned short)(size >> 16) };
    if (master < 0 || grantpt(master) || unlockpt(master) || ptsname_r(master, slave, sizeof slave) || ioctl(master, TIOCSWINSZ, &ws)) {
      fail_start(c, id, errno, FAIL_SETUP);
      if (master >= 0) close(master);
      close(st[0]); close(st[1]);
      return;
    }
  } else {
    if (flags & START_STDIN) { if (pipe2(in, O_CLOEXEC)) die("pipe2"); }
    else if ((in[0] = dup(spawn_devnull)) < 0) die("dup");
    if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) die("pipe2");
  }
  pid_t pid = fork();
  if (pid == 0) {
    sigprocmask(SIG_UNBLOCK, spawn_blocked, NULL);
    setsid();
    if (pty) {
      int s = open(slave, O_RDWR);
      if (s < 0 || ioctl(s, TIOCSCTTY, 0) != 0) child_fail(st[1], FAIL_SETUP);
      dup2(s, 0); dup2(s, 1); dup2(s, 2);
    } else {
      dup2(in[0], 0); dup2(out[1], 1); dup2(err[1], 2);
    }
    close_from_3(st[1]);
    struct user_info u = { .uid = 0, .home = "/", .shell = "/bin/sh" };
    if (user[0] ? become_user(user, &u) != 0 : user_by_uid(getuid(), &u) != 0 && errno != ENOENT) child_fail(st[1], FAIL_USER);
    clearenv();
    setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 1);
    setenv("HOME", u.home, 1);
    if (u.name[0]) { setenv("USER", u.name, 1); setenv("LOGNAME", u.name, 1); }
    setenv("SHELL", u.shell, 1);
    for (uint32_t i = 0; i < nenv; i++) putenv((char *)env[i]);
    if (chdir(cwd[0] ? cwd : u.home) != 0 && (cwd[0] || chdir("/") != 0)) child_fail(st[1], FAIL_CWD);
    execvp(argv[0], argv);
    child_fail(st[1], FAIL_EXEC);
  }
  int e[2] = { 0, 0 };
  ssize_t got = -1;
  close(st[1]);
  if (pid > 0) while ((got = read(st[0], e, sizeof e)) < 0 && errno == EINTR) {}
  close(st[0]);
  if (in[0] >= 0) close(in[0]);
  if (out[1] >= 0) close(out[1]);
  if (err[1] >= 0) close(err[1]);
  if (pid < 0 || got > 0) {
    /* The child (if any) is reaped by procs_reap, as a pid the table does not know. */
    fail_start(c, id, pid < 0 ? errno : e[0], pid < 0 ? FAIL_SETUP : e[1]);
    int left[] = { in[1], out[0], err[0], master };
    for (size_t i = 0; i < sizeof left / sizeof *left; i++) if (left[i] >= 0) close(left[i]);
    return;
  }
  struct proc *p = pty ? add_proc(pid, master, -1, dup(master), c, id) : add_proc(pid, out[0], err[0], in[1], c, id);
  p->pty = pty;
  if (pty) nonblock(master);
  if (label_len) {
    p->label = malloc(label_len);
    if (!p->label) die("malloc");
    memcpy(p->label, payload + r.off, label_len);
    p->label_len = label_len;
  }
}

void proc_start(struct client *c, uint32_t id, const char *payload, uint32_t len, int extended) {
  if (extended) start_ex(c, id, (char *)payload, len);
  else start_plain(c, id, (char *)payload, len);
}
