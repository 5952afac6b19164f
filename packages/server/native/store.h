#ifndef SBX_STORE_H
#define SBX_STORE_H
#include <stddef.h>
#include <sys/stat.h>

/* What scan.c, serve.c and subvol.c share (sbx-store's parts). */

/* What marks an opaque directory of an overlay layer. */
#define OPAQUE_XATTR "trusted.overlay.opaque"

/* A growing output buffer. */
struct out { char *p; size_t len, cap; };
int out_put(struct out *o, const void *p, size_t n);

/* Results of scan_tree (also the exit codes of `sbx-store scan`). */
enum { SCAN_OK = 0, SCAN_TOO_DEEP = 3, SCAN_FAILED = 125 };

/*
 * Appends every entry under root to o as "TYPE SIZE PATH\0" (store.c's usage has the types),
 * PATH relative to root. On SCAN_TOO_DEEP or SCAN_FAILED, err says why.
 */
int scan_tree(const char *root, struct out *o, char *err, size_t errlen);

/* An entry's type letter: f file, d directory, O opaque directory, l symlink, w whiteout, o other. */
char entry_type(const char *path, const struct stat *st);

/* A btrfs subvolume's root directory always has this inode number (BTRFS_FIRST_FREE_OBJECTID). */
enum { SUBVOL_ROOT_INO = 256 };

/* subvol.c: a scratch subvolume made, its disk limit set, a subvolume deleted (0 done, else err says why), and a whole
 * number from its decimal text (-1 if it is none). */
int make_scratch(const char *dir, long long root_id, long long limit_mb, char *err, size_t errlen);
int limit_subvolume(const char *dir, long long limit_mb, char *err, size_t errlen);
int delete_subvolume(const char *dir, char *err, size_t errlen);
long long whole(const char *s);

/* `sbx-store serve` (serve.c). */
int store_serve(int argc, char **argv);

#endif
