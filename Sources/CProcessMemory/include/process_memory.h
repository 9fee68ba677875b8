#ifndef CPROCESSMEMORY_H
#define CPROCESSMEMORY_H

#include <stddef.h>

/* Gives back what a burst of work left in this process's page tables and heap, without
 * changing anything it holds: the heap's free memory is returned to the kernel (malloc_trim),
 * and the pages of read-only file mappings (program and library code and constants) are
 * unmapped from the process (madvise MADV_DONTNEED) when no page of the mapping was ever
 * written by it (no anonymous, no private dirty page: the mapping is still the file's). Those
 * pages stay in the page cache and come back at the next touch, as a minor fault. Returns the
 * bytes of mappings so released. Call it when no thread loads or unloads libraries. */
size_t cpm_release_untouched_pages(void);

#endif
