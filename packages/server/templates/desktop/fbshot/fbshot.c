/*
 * fbshot: a PNG of display :0 read straight from Xvfb's framebuffer file, without a connection to
 * the X server. The desktop's Xvfb keeps its screen in an XWD file (`-fbdir`, bin/session); the
 * pixels are converted to RGB rows without a filter and deflated at zlib's fastest level (under
 * TCG a capture's cost is its CPU; at level 1 a page of text is half the size that filters and
 * zlib's run-length strategy made of it, for the same time), band by band, and a band whose pixels
 * are those of the last capture is taken from the band cache (below) instead.
 *
 * FBSHOT_FRAMEBUFFER names another framebuffer file (the default is the desktop's); the band
 * cache lives beside it; FBSHOT_NO_CACHE (set to anything) leaves the cache out.
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
#include <sys/file.h>
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

/* One row (its framebuffer pixels at `p`) as PNG has it: filter type 0 (None), then RGB bytes. */
static void row(const struct screen *s, const unsigned char *p, unsigned char *dst) {
  *dst++ = 0;
  if (s->lsb && s->rs == 16 && s->gs == 8 && s->bs == 0) {
    /* Xvfb's layout on x86: B, G, R, unused in memory. */
    for (uint32_t x = 0; x < s->width; x++, p += 4, dst += 3) { dst[0] = p[2]; dst[1] = p[1]; dst[2] = p[0]; }
    return;
  }
  for (uint32_t x = 0; x < s->width; x++, p += 4) {
    uint32_t v = s->lsb ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24 : be32(p);
    *dst++ = v >> s->rs; *dst++ = v >> s->gs; *dst++ = v >> s->bs;
  }
}

/*
 * The band cache: the screen is deflated in bands of BAND_ROWS rows, each an independent raw
 * deflate stream ended by a sync flush, so that the PNG's zlib stream is the bands' bytes one after
 * the other (then an empty final block and the Adler-32 combined from the bands'). A file beside
 * the framebuffer, one per user, keeps each band's framebuffer bytes and its deflated bytes: a band
 * whose pixels have not changed since the last capture is not converted or deflated again. Under
 * TCG deflating is most of a capture's cost, and between two captures most of a screen stays.
 * Without the file (no room, another owner, FBSHOT_NO_CACHE set) the same layout lives in memory.
 */
#define BAND_ROWS 16
#define CACHE_MAGIC "fbshotc"
#define CACHE_VERSION 1
struct cache_head { char magic[8]; uint32_t version, width, height, stride, lsb, rs, gs, bs, bands, slot, pad[5]; };
struct band { uint32_t adler, zlen; };
struct cache { unsigned char *map; size_t size; int fd; struct cache_head *head; struct band *band; unsigned char *pixels, *slots; };

/* The framebuffer file: FBSHOT_FRAMEBUFFER, else the desktop's. */
static const char *framebuffer(void) { const char *fb = getenv("FBSHOT_FRAMEBUFFER"); return fb && *fb ? fb : FRAMEBUFFER; }

/* How many rows band `b` has: BAND_ROWS, but for a last band of what is left. */
static uint32_t band_rows(const struct screen *s, uint32_t b) { uint32_t left = s->height - b * BAND_ROWS; return left < BAND_ROWS ? left : BAND_ROWS; }

static void cache_close(struct cache *c) {
  if (c->map && c->map != MAP_FAILED) munmap(c->map, c->size);
  if (c->fd >= 0) close(c->fd); /* and with it the lock */
}

/* Makes the file `size` bytes with its blocks reserved (a full /run refuses here rather than faulting a
 * write later); on failure it is left empty, so that a later capture does not take it as ready. */
static int resize(int fd, size_t size) {
  if (ftruncate(fd, (off_t)size) == 0 && posix_fallocate(fd, 0, (off_t)size) == 0) return 0;
  if (ftruncate(fd, 0)) {}
  return -1;
}

/* The cache for this screen: its file (locked for this capture) or, failing that, memory. */
static int cache_open(const struct screen *s, uint32_t slot, struct cache *c) {
  uint32_t bands = (s->height + BAND_ROWS - 1) / BAND_ROWS;
  struct cache_head want = { CACHE_MAGIC, CACHE_VERSION, s->width, s->height, s->stride, (uint32_t)s->lsb, (uint32_t)s->rs, (uint32_t)s->gs, (uint32_t)s->bs, bands, slot, { 0 } };
  c->size = sizeof want + (size_t)bands * sizeof(struct band) + (size_t)s->stride * s->height + (size_t)bands * slot;
  c->fd = -1;
  c->map = MAP_FAILED;
  char *path = NULL;
  const char *dir = framebuffer(), *slash = strrchr(dir, '/');
  if (!getenv("FBSHOT_NO_CACHE") && slash && asprintf(&path, "%.*s/fbshot-cache-%u", (int)(slash - dir), dir, (unsigned)geteuid()) >= 0) {
    struct stat st;
    c->fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (c->fd >= 0 && (flock(c->fd, LOCK_EX) || fstat(c->fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid()
        || ((size_t)st.st_size != c->size && resize(c->fd, c->size))
        || (c->map = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, 0)) == MAP_FAILED)) {
      close(c->fd);
      c->fd = -1;
    }
    free(path);
  }
  if (c->map == MAP_FAILED) c->map = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (c->map == MAP_FAILED) return -1;
  c->head = (struct cache_head *)c->map;
  c->band = (struct band *)(c->map + sizeof want);
  c->pixels = (unsigned char *)(c->band + bands);
  c->slots = c->pixels + (size_t)s->stride * s->height;
  if (memcmp(c->head, &want, sizeof want) != 0) {
    /* Another screen, layout or version (or a new file): every band is made again. */
    memset(c->band, 0, (size_t)bands * sizeof(struct band));
    memcpy(c->head, &want, sizeof want);
  }
  return 0;
}

/* Brings band `b` up to date with the framebuffer: kept when its pixels are the cached ones. */
static int band_update(const struct screen *s, struct cache *c, z_stream *z, uint32_t b, unsigned char *raw) {
  uint32_t y0 = b * BAND_ROWS, rows = band_rows(s, b);
  size_t bytes = (size_t)rows * s->stride, line = (size_t)s->width * 3 + 1;
  const unsigned char *live = s->pixels + (size_t)y0 * s->stride;
  unsigned char *kept = c->pixels + (size_t)y0 * s->stride, *slot = c->slots + (size_t)b * c->head->slot;
  struct band *e = &c->band[b];
  if (e->zlen && e->zlen <= c->head->slot && memcmp(live, kept, bytes) == 0) return 0;
  e->zlen = 0;
  /* Converted from the kept copy, so that the deflated bytes are of exactly the pixels kept. */
  memcpy(kept, live, bytes);
  for (uint32_t r = 0; r < rows; r++) row(s, kept + (size_t)r * s->stride, raw + r * line);
  if (deflateReset(z) != Z_OK) return -1;
  z->next_in = raw; z->avail_in = (uInt)(rows * line);
  z->next_out = slot; z->avail_out = c->head->slot;
  if (deflate(z, Z_SYNC_FLUSH) != Z_OK || z->avail_in != 0 || z->avail_out == 0) return -1;
  e->adler = (uint32_t)adler32(adler32(0, NULL, 0), raw, (uInt)(rows * line));
  e->zlen = c->head->slot - z->avail_out;
  return 0;
}

static int png(const struct screen *s, FILE *out) {
  static const unsigned char signature[8] = { 137, 'P', 'N', 'G', '\r', '\n', 26, '\n' };
  unsigned char ihdr[13];
  put32(ihdr, s->width);
  put32(ihdr + 4, s->height);
  ihdr[8] = 8; ihdr[9] = 2; ihdr[10] = 0; ihdr[11] = 0; ihdr[12] = 0; /* 8-bit RGB, not interlaced */
  if (fwrite(signature, 1, 8, out) != 8 || chunk(out, "IHDR", ihdr, 13)) return -1;
  size_t line = (size_t)s->width * 3 + 1;
  z_stream z = { 0 };
  struct cache c = { 0 };
  unsigned char *raw = malloc(line * BAND_ROWS), *stream = NULL;
  int rc = -1;
  if (!raw || deflateInit2(&z, 1, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) { free(raw); return -1; }
  if (cache_open(s, (uint32_t)deflateBound(&z, line * BAND_ROWS) + 64, &c)) goto end;
  /* The zlib stream: its header (deflate, 32 KiB window, fastest), the bands, an empty final block, Adler-32. */
  size_t total = 2 + 2 + 4;
  uLong adler = adler32(0, NULL, 0);
  for (uint32_t b = 0; b < c.head->bands; b++) {
    if (band_update(s, &c, &z, b, raw)) goto end;
    total += c.band[b].zlen;
    adler = adler32_combine(adler, c.band[b].adler, (z_off_t)(band_rows(s, b) * line));
  }
  if (!(stream = malloc(total))) goto end;
  size_t at = 0;
  stream[at++] = 0x78; stream[at++] = 0x01;
  for (uint32_t b = 0; b < c.head->bands; b++) { memcpy(stream + at, c.slots + (size_t)b * c.head->slot, c.band[b].zlen); at += c.band[b].zlen; }
  stream[at++] = 0x03; stream[at++] = 0x00;
  put32(stream + at, (uint32_t)adler);
  rc = chunk(out, "IDAT", stream, (uint32_t)total) || chunk(out, "IEND", NULL, 0) ? -1 : 0;
end:
  deflateEnd(&z);
  cache_close(&c);
  free(raw); free(stream);
  return rc;
}

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
