#define _GNU_SOURCE
#include "process_memory.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static size_t last_released;

size_t cpm_last_released(void) { return last_released; }

void cpm_release_untouched_code(void) {
    malloc_trim(0);
    last_released = 0;
    FILE *smaps = fopen("/proc/self/smaps", "re");
    if (smaps == NULL) return;
    char line[4096];
    unsigned long start = 0, end = 0;
    int candidate = 0;
    long anonymous = -1, dirty = -1;
    size_t released = 0;
    for (int more = 1; more;) {
        more = fgets(line, sizeof line, smaps) != NULL;
        unsigned long from, to, offset, inode;
        char perms[5], device[16];
        int header = more && sscanf(line, "%lx-%lx %4s %lx %15s %lu", &from, &to, perms, &offset, device, &inode) == 6;
        if (!more || header) {
            /* The mapping read so far, whole: released only when nothing of it is the process's own. */
            if (candidate && anonymous == 0 && dirty == 0 && madvise((void *)start, end - start, MADV_DONTNEED) == 0) {
                released += end - start;
            }
            if (!more) break;
            start = from;
            end = to;
            /* A file's (an inode), private, executable, never writable: code. */
            candidate = inode != 0 && perms[1] == '-' && perms[2] == 'x' && perms[3] == 'p';
            anonymous = -1;
            dirty = -1;
        } else if (strncmp(line, "Anonymous:", 10) == 0) {
            anonymous = strtol(line + 10, NULL, 10);
        } else if (strncmp(line, "Private_Dirty:", 14) == 0) {
            dirty = strtol(line + 14, NULL, 10);
        }
    }
    fclose(smaps);
    last_released = released;
}
