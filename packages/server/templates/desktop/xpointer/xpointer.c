/*
 * xpointer: xdotool's pointer commands (moves, clicks, buttons) sent through the X server's XTEST
 * extension by a static program that speaks the X protocol itself: no libX11 or libxdo to link at
 * start, which under TCG is most of what an xdotool run costs.
 *
 *   xpointer CHAIN        CHAIN is commands in xdotool's syntax, run in order:
 *                           mousemove [--sync] X Y
 *                           click [--repeat N] [--delay MS] BUTTON   (100 ms between repeats)
 *                           mousedown BUTTON | mouseup BUTTON
 *                           getmouselocation   prints "x:X y:Y screen:0 window:W" (W the top-level
 *                                              window under the pointer, or the root)
 *   xdotool ARGS          when run as `xdotool` (first on PATH): a chain of the first four is
 *                         served here; anything else (getmouselocation, keys, windows, other
 *                         options, a display that is not local) runs /usr/bin/xdotool as asked
 *
 * `--sync` holds: every request is answered by the server before the program exits, so the pointer
 * is where it was sent by then, and a move to where the pointer already is returns at once.
 * The display is $DISPLAY's local one (":N"), reached on its abstract or file socket without
 * authorization (the desktop's Xvfb runs with -ac). Exit status: 0 done; 1 an error, said on stderr
 * ("Can't open display" when there is no display).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define REAL_XDOTOOL "/usr/bin/xdotool"
#define MAX_STEPS 64
#define X_QUERY_POINTER 38
#define X_GET_INPUT_FOCUS 43
#define X_QUERY_EXTENSION 98
#define XTEST_FAKE_INPUT 2
#define BUTTON_PRESS 4
#define BUTTON_RELEASE 5
#define MOTION_NOTIFY 6

enum op { MOVE, CLICK, DOWN, UP, LOCATION };
struct step { enum op op; int x, y, button, repeat, delay_ms; };

static int fd = -1;
static uint16_t seq;
static uint32_t root;

/* Parses a decimal integer in [lo, hi]; 0 when `s` is one. */
static int integer(const char *s, long lo, long hi, int *out) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

/* The chain as steps; -1 when a word is not part of what this program serves. */
static int parse(int argc, char **argv, struct step *steps, int *n, int location_ok) {
  *n = 0;
  for (int i = 0; i < argc;) {
    if (*n == MAX_STEPS) return -1;
    struct step *s = &steps[(*n)++];
    const char *cmd = argv[i++];
    if (strcmp(cmd, "mousemove") == 0) {
      if (i < argc && strcmp(argv[i], "--sync") == 0) i++;
      if (i + 1 >= argc || integer(argv[i], -32768, 32767, &s->x) || integer(argv[i + 1], -32768, 32767, &s->y)) return -1;
      s->op = MOVE;
      i += 2;
    } else if (strcmp(cmd, "click") == 0) {
      s->op = CLICK; s->repeat = 1; s->delay_ms = 100;
      for (;;) {
        if (i + 1 < argc && strcmp(argv[i], "--repeat") == 0) { if (integer(argv[i + 1], 1, 1000, &s->repeat)) return -1; i += 2; }
        else if (i + 1 < argc && strcmp(argv[i], "--delay") == 0) { if (integer(argv[i + 1], 0, 60000, &s->delay_ms)) return -1; i += 2; }
        else break;
      }
      if (i >= argc || integer(argv[i++], 1, 255, &s->button)) return -1;
    } else if (strcmp(cmd, "mousedown") == 0 || strcmp(cmd, "mouseup") == 0) {
      s->op = cmd[5] == 'd' ? DOWN : UP;
      if (i >= argc || integer(argv[i++], 1, 255, &s->button)) return -1;
    } else if (location_ok && strcmp(cmd, "getmouselocation") == 0) {
      s->op = LOCATION;
    } else {
      return -1;
    }
  }
  return *n ? 0 : -1;
}

/* The connection broke (a write or read failed): said, and the end. */
static _Noreturn void gone(void) {
  fprintf(stderr, "xpointer: the X server went away\n");
  exit(1);
}

static int write_all(const void *buf, size_t len) {
  const unsigned char *p = buf;
  while (len) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w; len -= (size_t)w;
  }
  return 0;
}

static int read_all(void *buf, size_t len) {
  unsigned char *p = buf;
  while (len) {
    ssize_t r = read(fd, p, len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r; len -= (size_t)r;
  }
  return 0;
}

/* Sends one request (its length a multiple of 4); answers its sequence number. */
static int request(void *req, size_t len) {
  uint16_t words = (uint16_t)(len / 4);
  memcpy((unsigned char *)req + 2, &words, 2);
  if (write_all(req, len)) gone();
  return ++seq;
}

/* Reads until the reply to request `want` (its 32 bytes in `reply`, the rest skipped); an error exits. */
static void reply_to(uint16_t want, unsigned char reply[32]) {
  for (;;) {
    if (read_all(reply, 32)) gone();
    uint16_t s;
    memcpy(&s, reply + 2, 2);
    if (reply[0] == 0) {
      fprintf(stderr, "xpointer: X error %u on request %u.%u\n", reply[1], reply[10], reply[8] | reply[9] << 8);
      exit(1);
    }
    if (reply[0] != 1) continue; /* an event: none is asked for, none matters */
    uint32_t more;
    memcpy(&more, reply + 4, 4);
    for (uint64_t left = (uint64_t)more * 4; left;) {
      unsigned char skip[256];
      size_t k = left < sizeof skip ? (size_t)left : sizeof skip;
      if (read_all(skip, k)) gone();
      left -= k;
    }
    if (s == want) return;
  }
}

/* Connects to display :N (abstract socket first, then the socket file); 0 when it accepted us. */
static int open_display(const char *display) {
  int n;
  if (!display || display[0] != ':') return -1;
  char num[16];
  size_t k = strcspn(display + 1, ".");
  if (k == 0 || k >= sizeof num) return -1;
  memcpy(num, display + 1, k);
  num[k] = 0;
  if (integer(num, 0, 65535, &n)) return -1;
  for (int abstract = 1; abstract >= 0; abstract--) {
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    int len = snprintf(a.sun_path + abstract, sizeof a.sun_path - 1, "/tmp/.X11-unix/X%d", n);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + abstract + len)) == 0) break;
    close(fd);
    fd = -1;
  }
  if (fd < 0) return -1;
  /* Little-endian byte order, protocol 11.0, no authorization. */
  unsigned char hello[12] = { 'l', 0, 11, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
  unsigned char head[8];
  if (write_all(hello, sizeof hello) || read_all(head, sizeof head)) return -1;
  uint16_t words;
  memcpy(&words, head + 6, 2);
  unsigned char *setup = malloc((size_t)words * 4 + 1);
  if (!setup || read_all(setup, (size_t)words * 4) || head[0] != 1 || words < 10) return -1;
  uint16_t vendor;
  memcpy(&vendor, setup + 16, 2);
  size_t screen0 = 32 + (((size_t)vendor + 3) & ~(size_t)3) + (size_t)setup[21] * 8;
  if (setup[20] == 0 || screen0 + 4 > (size_t)words * 4) return -1;
  memcpy(&root, setup + screen0, 4);
  free(setup);
  return 0;
}

/* The XTEST extension's major opcode, or 0 when the server has none. */
static uint8_t xtest_opcode(void) {
  unsigned char req[16] = { X_QUERY_EXTENSION, 0, 0, 0, 5, 0, 0, 0, 'X', 'T', 'E', 'S', 'T', 0, 0, 0 };
  unsigned char reply[32];
  reply_to((uint16_t)request(req, sizeof req), reply);
  return reply[8] ? reply[9] : 0;
}

/* One fake event: a move of the pointer to (x, y) on the root, or a button's press or release. */
static void fake(uint8_t opcode, uint8_t type, uint8_t detail, int x, int y) {
  unsigned char req[36] = { opcode, XTEST_FAKE_INPUT, 0, 0, type, detail };
  if (type == MOTION_NOTIFY) {
    int16_t rx = (int16_t)x, ry = (int16_t)y;
    memcpy(req + 12, &root, 4);
    memcpy(req + 24, &rx, 2);
    memcpy(req + 26, &ry, 2);
  }
  request(req, sizeof req);
}

/* Waits until the server has handled every request sent so far. */
static void round_trip(void) {
  unsigned char req[4] = { X_GET_INPUT_FOCUS, 0, 0, 0 }, reply[32];
  reply_to((uint16_t)request(req, sizeof req), reply);
}

static void pause_ms(int ms) {
  struct timespec t = { ms / 1000, (long)(ms % 1000) * 1000000L };
  while (nanosleep(&t, &t) && errno == EINTR) {}
}

static void print_location(void) {
  unsigned char req[8] = { X_QUERY_POINTER, 0, 0, 0 }, reply[32];
  memcpy(req + 4, &root, 4);
  reply_to((uint16_t)request(req, sizeof req), reply);
  uint32_t child;
  int16_t x, y;
  memcpy(&child, reply + 12, 4);
  memcpy(&x, reply + 16, 2);
  memcpy(&y, reply + 18, 2);
  printf("x:%d y:%d screen:0 window:%u\n", x, y, child ? child : root);
  fflush(stdout);
}

int main(int argc, char **argv) {
  const char *base = strrchr(argv[0], '/');
  base = base ? base + 1 : argv[0];
  int as_xdotool = strcmp(base, "xdotool") == 0;
  struct step steps[MAX_STEPS];
  int n;
  int ours = parse(argc - 1, argv + 1, steps, &n, !as_xdotool) == 0;
  if (as_xdotool && (!ours || open_display(getenv("DISPLAY")))) {
    argv[0] = "xdotool";
    execv(REAL_XDOTOOL, argv);
    fprintf(stderr, "xdotool: %s: %s\n", REAL_XDOTOOL, strerror(errno));
    return 127;
  }
  if (!ours) {
    fprintf(stderr, "usage: xpointer [mousemove [--sync] X Y] [click [--repeat N] [--delay MS] BUTTON] [mousedown B] [mouseup B] [getmouselocation] ...\n");
    return 1;
  }
  if (!as_xdotool && open_display(getenv("DISPLAY"))) {
    fprintf(stderr, "Can't open display: %s\n", getenv("DISPLAY") ? getenv("DISPLAY") : "(DISPLAY is not set)");
    return 1;
  }
  uint8_t xtest = xtest_opcode();
  if (!xtest) {
    if (as_xdotool) { argv[0] = "xdotool"; execv(REAL_XDOTOOL, argv); }
    fprintf(stderr, "xpointer: the X server has no XTEST extension\n");
    return 1;
  }
  for (int i = 0; i < n; i++) {
    const struct step *s = &steps[i];
    switch (s->op) {
      case MOVE: fake(xtest, MOTION_NOTIFY, 0, s->x, s->y); break;
      case DOWN: fake(xtest, BUTTON_PRESS, (uint8_t)s->button, 0, 0); break;
      case UP: fake(xtest, BUTTON_RELEASE, (uint8_t)s->button, 0, 0); break;
      case CLICK:
        for (int r = 0; r < s->repeat; r++) {
          if (r) { round_trip(); pause_ms(s->delay_ms); }
          fake(xtest, BUTTON_PRESS, (uint8_t)s->button, 0, 0);
          fake(xtest, BUTTON_RELEASE, (uint8_t)s->button, 0, 0);
        }
        break;
      case LOCATION: print_location(); break;
    }
  }
  round_trip();
  return 0;
}
