/*
 * fbshot: a PNG of display :0 read straight from Xvfb's framebuffer file, without a connection to
 * the X server. The desktop's Xvfb keeps its screen in an XWD file (`-fbdir`, bin/session); the
 * pixels are converted to RGB rows with PNG's Sub filter (a flat run of colour becomes zeros) and
 * deflated with zlib's run-length strategy (matches at distance 1 only: little CPU, which under TCG
 * is what a capture costs, and a desktop's flat areas still compress well).
 *
 * FBSHOT_FRAMEBUFFER names another framebuffer file (the default is the desktop's).
 *
 *   fbshot FILE|-        a PNG of the screen (the pointer as Xvfb draws it) to FILE or stdout
 *   scrot [OPTIONS] FILE when run as `scrot` (first on PATH): `--pointer`/`-p` and `--overwrite`/`-o`
 *                        on display :0 are served here; anything else runs /usr/bin/scrot as asked
 *
 * Exit status: 0 written; 3 the framebuffer is not there (another Xvfb serves :0, or none does),
 * nothing written; 1 anything else. The file is complete or absent: it is written beside its name
 * and renamed over it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define FRAMEBUFFER "/run/shellbase-desktop/Xvfb_screen0"
#define REAL_SCROT "/usr/bin/scrot"
#define NOT_THERE 3

static uint32_t be32(const unsigned char *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static void put32(unsigned char *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v; }
static int shift_of(uint32_t mask) { int s = 0; while (mask && !(mask & 1)) { mask >>= 1; s++; } return s; }

/* The screen as the XWD header describes it: 32-bit ZPixmap pixels with 8-bit channels. */
struct screen { const unsigned char *pixels; uint32_t width, height, stride; int lsb; int rs, gs, bs; };

/* Reads the header of the mapped file; 0 when it is a screen this program can read. */
static int parse(const unsigned char *m, size_t size, struct screen *s) {
  if (size < 100) return -1;
  uint32_t header = be32(m), format = be32(m + 8), width = be32(m + 16), height = be32(m + 20);
  uint32_t order = be32(m + 28), bpp = be32(m + 44), stride = be32(m + 48);
  uint32_t red = be32(m + 56), green = be32(m + 60), blue = be32(m + 64), ncolors = be32(m + 76);
  if (format != 2 || bpp != 32 || width == 0 || height == 0 || width > 16384 || height > 16384 || stride < width * 4) return -1;
  int rs = shift_of(red), gs = shift_of(green), bs = shift_of(blue);
  if ((red | green | blue) > 0xffffffu || red >> rs != 0xff || green >> gs != 0xff || blue >> bs != 0xff) return -1;
  uint64_t at = (uint64_t)header + (uint64_t)ncolors * 12;
  if (at + (uint64_t)stride * height > size) return -1;
  *s = (struct screen){ m + at, width, height, stride, order == 0, rs, gs, bs };
  return 0;
}

static int chunk(FILE *out, const char *type, const unsigned char *data, uint32_t len) {
  unsigned char head[8];
  put32(head, len);
  memcpy(head + 4, type, 4);
  /* Not crc32(crc, NULL, 0): with no buffer zlib answers its initial value, not `crc`. */
  uLong crc = crc32(0, head + 4, 4);
  if (len) crc = crc32(crc, data, len);
  unsigned char tail[4];
  put32(tail, (uint32_t)crc);
  return fwrite(head, 1, 8, out) == 8 && (len == 0 || fwrite(data, 1, len, out) == len) && fwrite(tail, 1, 4, out) == 4 ? 0 : -1;
}

/* One filtered row: filter type 1 (Sub), then each byte less the one three before it. */
static void row(const struct screen *s, uint32_t y, unsigned char *dst) {
  const unsigned char *p = s->pixels + (size_t)y * s->stride;
  unsigned char pr = 0, pg = 0, pb = 0;
  *dst++ = 1;
  for (uint32_t x = 0; x < s->width; x++, p += 4) {
    uint32_t v = s->lsb ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24 : be32(p);
    unsigned char r = v >> s->rs, g = v >> s->gs, b = v >> s->bs;
    *dst++ = r - pr; *dst++ = g - pg; *dst++ = b - pb;
    pr = r; pg = g; pb = b;
  }
}

static int png(const struct screen *s, FILE *out) {
  static const unsigned char signature[8] = { 137, 'P', 'N', 'G', '\r', '\n', 26, '\n' };
  unsigned char ihdr[13];
  put32(ihdr, s->width);
  put32(ihdr + 4, s->height);
  ihdr[8] = 8; ihdr[9] = 2; ihdr[10] = 0; ihdr[11] = 0; ihdr[12] = 0; /* 8-bit RGB, not interlaced */
  if (fwrite(signature, 1, 8, out) != 8 || chunk(out, "IHDR", ihdr, 13)) return -1;
  size_t line = (size_t)s->width * 3 + 1;
  unsigned char *in = malloc(line), *buf = malloc(1 << 18);
  z_stream z = { 0 };
  int rc = -1;
  if (!in || !buf || deflateInit2(&z, 1, Z_DEFLATED, 15, 8, Z_RLE) != Z_OK) goto done;
  for (uint32_t y = 0; y <= s->height; y++) {
    int flush = y == s->height ? Z_FINISH : Z_NO_FLUSH;
    if (y < s->height) { row(s, y, in); z.next_in = in; z.avail_in = (uInt)line; }
    int st;
    do {
      z.next_out = buf; z.avail_out = 1 << 18;
      st = deflate(&z, flush);
      if (st == Z_STREAM_ERROR) goto end;
      uint32_t n = (1 << 18) - z.avail_out;
      if (n && chunk(out, "IDAT", buf, n)) goto end;
    } while (z.avail_out == 0 || (flush == Z_FINISH && st != Z_STREAM_END));
  }
  rc = chunk(out, "IEND", NULL, 0);
end:
  deflateEnd(&z);
done:
  free(in); free(buf);
  return rc;
}

/* The framebuffer file: FBSHOT_FRAMEBUFFER, else the desktop's. */
static const char *framebuffer(void) { const char *fb = getenv("FBSHOT_FRAMEBUFFER"); return fb && *fb ? fb : FRAMEBUFFER; }

/* Writes the screen's PNG to `path` beside it, then renames it over `path`. */
static int write_file(const struct screen *s, const char *path) {
  char *tmp = NULL;
  if (asprintf(&tmp, "%s.fbshot-%d", path, (int)getpid()) < 0) return 1;
  int rc = 1;
  FILE *out = fopen(tmp, "wbx");
  if (!out) {
    fprintf(stderr, "fbshot: %s: %s\n", tmp, strerror(errno));
  } else {
    int bad = png(s, out);
    bad |= fclose(out) != 0;
    if (!bad && rename(tmp, path) == 0) rc = 0;
    else { fprintf(stderr, "fbshot: writing %s: %s\n", path, strerror(errno)); unlink(tmp); }
  }
  free(tmp);
  return rc;
}

/* The PNG of the framebuffer to `path` ("-": stdout); NOT_THERE without a framebuffer. */
static int capture(const char *path) {
  int fd = open(framebuffer(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NOT_THERE;
  struct stat st;
  if (fstat(fd, &st) || st.st_size <= 0) { close(fd); return NOT_THERE; }
  size_t size = (size_t)st.st_size;
  void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return NOT_THERE;
  struct screen s;
  int rc = NOT_THERE;
  if (parse(m, size, &s) == 0) rc = strcmp(path, "-") == 0 ? (png(&s, stdout) || fflush(stdout) ? 1 : 0) : write_file(&s, path);
  munmap(m, size);
  return rc;
}

/* scrot writes the format its file's name ends in: this program only PNG. */
static int png_name(const char *f) { size_t n = strlen(f); return n > 4 && strcmp(f + n - 4, ".png") == 0; }

/* As `scrot`: the SDK's `scrot --pointer FILE` (and --overwrite) on display :0 here, anything else scrot's. */
static int as_scrot(int argc, char **argv) {
  const char *display = getenv("DISPLAY");
  int pointer = 0, overwrite = 0, ours = display && (strcmp(display, ":0") == 0 || strcmp(display, ":0.0") == 0);
  const char *file = NULL;
  for (int i = 1; i < argc && ours; i++) {
    if (strcmp(argv[i], "--pointer") == 0 || strcmp(argv[i], "-p") == 0) pointer = 1;
    else if (strcmp(argv[i], "--overwrite") == 0 || strcmp(argv[i], "-o") == 0) overwrite = 1;
    else if (argv[i][0] != '-' && !file && png_name(argv[i])) file = argv[i];
    else ours = 0;
  }
  /* Without --pointer scrot leaves the pointer out, which the framebuffer has drawn in; without
   * --overwrite it names its file anew when one is there. */
  if (ours && pointer && file && (overwrite || access(file, F_OK) != 0)) {
    int rc = capture(file);
    if (rc != NOT_THERE) return rc;
  }
  execv(REAL_SCROT, argv);
  fprintf(stderr, "scrot: %s: %s\n", REAL_SCROT, strerror(errno));
  return 127;
}

int main(int argc, char **argv) {
  const char *name = strrchr(argv[0], '/');
  name = name ? name + 1 : argv[0];
  if (strcmp(name, "scrot") == 0) return as_scrot(argc, argv);
  if (argc != 2) {
    fprintf(stderr, "usage: fbshot FILE|-   (a PNG of display :0 from Xvfb's framebuffer file %s)\n", framebuffer());
    return 1;
  }
  int rc = capture(argv[1]);
  if (rc == NOT_THERE) fprintf(stderr, "fbshot: no framebuffer file of display :0 at %s\n", framebuffer());
  return rc;
}
