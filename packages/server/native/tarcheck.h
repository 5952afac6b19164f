#ifndef SBX_TARCHECK_H
#define SBX_TARCHECK_H

/* tarcheck-blob.c: --blob's pump. blob_open makes its pipe and returns the end to read (or -1);
 * past `most` bytes the process ends (exit 65, "bad …" on stdout), calling stop_children first
 * (blob_failing() is true from then on).
 * blob_start starts the thread (after the children are forked: a fork copies no thread that
 * could hold a lock); blob_bytes is how much came so far; blob_end waits for the end of stdin
 * and gives the blob's SHA-256. */
int blob_open(unsigned long long most, void (*stop_children)(void));
int blob_start(void);
unsigned long long blob_bytes(void);
int blob_end(unsigned char digest[32]);
/* Whether the pump is ending the process (its children stopped by it, so what the main thread
 * sees of them is not the answer): the main thread then leaves the exit to the pump. */
int blob_failing(void);

#endif
